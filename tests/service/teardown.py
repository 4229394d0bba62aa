"""Tear a test service down without leaving its jobs behind.

``Service.close()`` deliberately leaves jobs running (a restarted service re-attaches), and
``backend.stop_all()`` while the loop still runs only makes the loop see the jobs vanish and start them
again. So: stop the loop first, then the jobs, then the API.
"""
from __future__ import annotations


def stop_service_and_jobs(svc, *clients) -> None:
    """`clients`: CLI processes following the service (`logs -f`, `events -f`, `status -w`); None where not started."""
    for client in clients:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait(timeout=30)
    svc.thread.stop()
    if svc.thread.is_alive():
        svc.thread.join(timeout=30)
    svc.backend.stop_all()
    svc.close()
