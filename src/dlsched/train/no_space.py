"""A runtime that stops because its job folder's disk is full (ENOSPC, or the user's quota: EDQUOT) did not fail:
its checkpoints stand, and once there is room again its job resumes from the newest. It exits ``EXIT_NO_SPACE``
without writing ``failed`` (a status it could still write in a byte of room would fail the job for good), and the
backends read that exit as a lost coordinator (re-queued, a bounded number of times), as a SIGKILL. A full disk for a
moment (a checkpoint of another job, a log rotation) failed every job writing there, for good."""
from __future__ import annotations

import errno

EXIT_NO_SPACE = 73   # EX_CANTCREAT: an output file cannot be written
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(e: BaseException | None) -> bool:
    """Whether ``e`` or an exception it was raised from or while handling is a full disk's."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in NO_SPACE:
            return True
        e = e.__cause__ or e.__context__
    return False
