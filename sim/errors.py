"""Errors that reach a user: each message names the problem and says how to fix it."""


class HarnessError(Exception):
    """Bad input (target name, bug id, size, release): printed as one line, no traceback."""


class TargetUnavailable(HarnessError):
    """The target cannot be built on this machine (e.g. vLLM is not installed)."""
