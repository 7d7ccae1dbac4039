"""The trust boundary as a folder: every program that runs INSIDE a sandbox, and the code they share.

What is here runs on the sandbox image's own python3, with no path to import our packages from:

* the programs: ``harness`` (the grading harness), ``step_runner`` (an agent step), ``driver`` (a language
  step), ``fork_server_main`` and ``docker_entry_main`` (the in-sandbox servers), ``container_init`` (pid 1 of
  a container). Each is shipped the same way (``workers.sandbox.guest_program``): one source text in which
  ``workers.sandbox.guest_source`` splices, in place of each top-level
  ``from workers.sandbox.guest.<module> import ...`` line, the source of that module (and, the same way, of
  each one it imports, every module once), compiled by the host; the program's bytecode and source go on the
  run's stdin, and ``loader`` (the ``-c`` source of every launch) runs it;
* the modules they are made of: ``clock`` (the time limit), ``framing`` (the nonce-framed record protocol's
  constants), ``plumbing`` (fd and ``prctl`` helpers), ``as_main``, ``boot_common`` (what the two servers
  share), the harness's (``typed_values``, ``child_pipes``, ``candidate_server``, ``harness_records``,
  ``call_suites``, ``io_suite``, ``harness_workspace``) and the step runner's (``step_errors``,
  ``workspace_tar``, ``workspace_paths``, ``workspace_snapshot``, ``step_exec``, ``step_files``).

So the rule of this package: the standard library only, and of our own code only this package (import-linter
contracts in ``pyproject.toml`` and ``tests/unit/workers/sandbox/test_guest_source.py`` check it). The host
imports these modules too, for their constants and parsers, so one definition serves both sides.
"""
