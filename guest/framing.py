"""The nonce-framed record protocol between an in-sandbox program and the host: its constants, defined once.

An in-sandbox program reports to the host in lines of its stdout that begin ``MAGIC <nonce> `` and go on with a
JSON object. The nonce (``NONCE_LEN`` hex bytes, fresh for every run) comes on the program's stdin, which the
candidate never sees, so a line the candidate prints cannot pass for a record: the host reads only lines framed
with this run's nonce. The grading harness and the language driver frame with ``MAGIC``; the episode step
runner, whose frames are a strict sequence (a header line each, then a payload), with ``STEP_MAGIC``.

Guest code: no imports at all and no ``from __future__`` import (it is spliced, by
``workers.sandbox.guest_source``, into the programs that import it, after their own imports). The host imports
it as a module: its parsers (``workers.grading.suites``, ``workers.grading.results``,
``workers.languages.steps``, ``workers.episodes.step``) read the very bytes the guests write.
"""

#: Begins every record of the grading harness and the language driver.
MAGIC = b"@@RS1"
#: Begins every frame of the episode step runner.
STEP_MAGIC = b"@@RSTEP1"
#: Length of a run's nonce: hex digits, so never a space or a newline.
NONCE_LEN = 32


def frame_prefix(nonce: bytes, magic: bytes = MAGIC) -> bytes:
    """What every record of a run framed with ``nonce`` starts with: ``magic``, a space, ``nonce``, a space."""
    return magic + b" " + nonce + b" "
