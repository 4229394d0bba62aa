"""Every kind of event the service stores (an event's ``kind`` in ``GET /events``): the one list ``dlsched events
--type`` checks a filter against, so a typo is an error naming the valid kinds, not an empty list."""
from __future__ import annotations

from dlsched.service.job_events import EVENTS_DROPPED
from dlsched.service.progress_segments import TRIMMED
from dlsched.service.retention import PURGED
from dlsched.service.stalls import PROGRESSING, STALLED
from dlsched.service.store import ACTIVE, TERMINAL
from dlsched.train.progress_log import HEADER
from dlsched.train.protocol import EVENTS

# a start, or a grow, whose reservation timed out (``service.coordinator_loss``, ``service.failed_actions``)
START_UNRESERVED, GROW_UNRESERVED = "start_unreserved", "grow_unreserved"
# a start that could not write the job's folder (its disk full): left queued, a bounded number of rounds
START_NO_SPACE = "start_no_space"
# the service's own: a submission, each state a job enters, the requests and what the loop saw
SERVICE_EVENTS = ("submitted", *ACTIVE, *TERMINAL, "cancel_requested", "member_cancel_requested", "resize_requested", "resize_released",
                  "workers_lost", "reattached", "service_started", "node_lost", "node_up", "prediction_failed",
                  "target_reached", PURGED, TRIMMED,
                  START_UNRESERVED, GROW_UNRESERVED, START_NO_SPACE, STALLED, PROGRESSING, EVENTS_DROPPED)
# a runtime event of the job's progress file is stored as job_<event>; the backend's reader adds malformed_progress;
# a rotated log's header line is read past, never stored
EVENT_KINDS = SERVICE_EVENTS + tuple(f"job_{e}" for e in (*EVENTS, "malformed_progress") if e != HEADER)
