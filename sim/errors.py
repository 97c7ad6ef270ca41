"""Errors that reach a user: each message names the problem and says how to fix it."""


class HarnessError(Exception):
    """Bad input (target name, bug id, size, release): printed as one line, no traceback."""


class TargetUnavailable(HarnessError):
    """The target cannot be built on this machine (e.g. vLLM is not installed)."""


class AdapterError(TargetUnavailable):
    """The adapter could not drive the installed release: a call into it (or the target's
    construction) raised where no property was checked. The message names the call and the
    error; the outcome is ``unavailable``, never a divergence and never a pass."""


class CapabilityMissing(TargetUnavailable):
    """The installed release lacks what one configuration needs (e.g. secondary tiers before
    vLLM 0.22.0). A machine skips that configuration and reports the reason; the others run."""


class NotDriven(CapabilityMissing):
    """The installed release *has* the class or feature, but the harness cannot drive it yet
    (its meaning there is not modelled, or the adapter cannot build it): reported
    ``unavailable`` with the reason, never ``absent`` (which says the release lacks it)."""

    def __str__(self) -> str:
        return f"unavailable: {super().__str__()}"
