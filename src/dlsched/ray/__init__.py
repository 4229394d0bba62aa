"""Ray in one place: the process-host actor (``host``) that both the Ray backend (a job's runtime) and the
runtime's Ray launcher (each worker) run their processes in."""
