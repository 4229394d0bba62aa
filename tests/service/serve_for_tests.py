"""``dlsched`` CLI with the test-only policies registered: lets tests run ``serve`` as a real separate process."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.service import policies  # noqa: E402,F401
from dlsched.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[0] = "dlsched"
    main()
