"""Whose fault it is when an agent step cannot be carried out: the agent's, the job's, or the workspace's.

Guest code (standard library only), spliced into the episode step runner (``step_runner``); the host
reads the step runner's frames, not these classes.
"""


class StepError(Exception):
    """The action cannot be carried out; the message goes back to the agent (``rejected``)."""


class JobError(Exception):
    """The job or the snapshot sent in is unusable: the infrastructure's fault, never the agent's."""


class WorkspaceError(Exception):
    """The workspace cannot be kept (over its caps, or a file changed while packed); the message says why."""
