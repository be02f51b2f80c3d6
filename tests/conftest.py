"""Test session set-up: a private key directory, so that tests never touch the user's keys.

Set at import (before the test modules snapshot ``os.environ`` for their worker processes), so
the processes the tests start find the same keys.
"""

from __future__ import annotations

import os
import tempfile

os.environ["OPTUNA_FEDBO_HOME"] = tempfile.mkdtemp(prefix="optuna-fedbo-test-keys-")
