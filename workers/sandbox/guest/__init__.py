"""The trust boundary as a folder: every program that runs INSIDE a sandbox, and the code they share.

What is here runs on the sandbox image's own python3, with no path to import our packages from:

* ``harness`` (the grading harness), ``step_runner`` (an agent step), ``driver`` (a language step),
  ``container_init`` (pid 1 of a container): each shipped as one source text by
  ``workers.sandbox.guest_source``, which splices in, in place of its top-level
  ``from workers.sandbox.guest.<module> import ...`` line, the source of each guest module it imports (and,
  the same way, of each one those import, every module once): ``clock`` (the time limit), ``framing`` (the
  nonce-framed record protocol's constants), ``plumbing`` (fd and ``prctl`` helpers), ``as_main``, and the
  modules the harness (``typed_values``, ``child_pipes``, ``candidate_server``, ``harness_records``,
  ``call_suites``, ``io_suite``, ``harness_workspace``) and the step runner (``step_errors``,
  ``workspace_tar``, ``workspace_paths``, ``workspace_snapshot``, ``step_exec``, ``step_files``) are made of;
* ``fork_server_main`` and ``docker_entry_main`` (the in-sandbox servers) with ``boot_common`` (what they
  share), shipped by ``workers.sandbox.boot``: run in one globals dict, ``boot_common`` first (its guest
  imports spliced in the same way).

So the rule of this package: the standard library only, and of our own code only this package (import-linter
contracts in ``pyproject.toml`` and ``tests/unit/workers/sandbox/test_guest_source.py`` check it). The host
imports these modules too, for their constants and parsers, so one definition serves both sides.
"""
