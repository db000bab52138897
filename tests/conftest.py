"""The root of the tests: pytest puts this directory on ``sys.path`` (it holds a conftest.py), so
every suite imports the shared helpers as ``harness`` (servers and Redis started and stopped)."""
