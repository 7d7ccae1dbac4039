"""Grading: run a task's suites in a sandbox, compare outside it, and flag hacks (the reward is the
pipeline policy's, applied by the CLI layer: ``rewardstream.cli.graded``).

Public API: ``Grader``/``grade`` (results), ``run_call_cases`` (plain-JSON return values of a reference
solution, for task converters), ``analyze`` (static analysis), ``compare_values``/``compare_stdout``, and
``refuse_workspace``/``public_suite`` (``WorkspaceTaskError``): ``grade`` runs one-shot tasks only; an
episode's graded workspace runs through ``Grader.run_suites(..., workspace=suites.WorkspaceJob)``.
"""

from __future__ import annotations

from workers.grading.compare import compare_stdout, compare_values
from workers.grading.grader import (
    Grader,
    GraderConfig,
    GradeResult,
    WorkspaceTaskError,
    grade,
    public_suite,
    refuse_workspace,
    run_call_cases,
)
from workers.grading.static_analysis import Flag, analyze
from workers.grading.suites import CallArgs, CaseValue

__all__ = [
    "CallArgs",
    "CaseValue",
    "Flag",
    "GradeResult",
    "Grader",
    "GraderConfig",
    "WorkspaceTaskError",
    "analyze",
    "compare_stdout",
    "compare_values",
    "grade",
    "public_suite",
    "refuse_workspace",
    "run_call_cases",
]
