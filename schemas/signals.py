"""The three signals a reward joins, named once, with the topic each travels on and the worker role that
writes it.

Why here: a signal used to be spelled four ways (a policy part, a topic role, a writer role, a reward's
input ref) with a hand-written mapping between each pair; now every other spelling is looked up in this
table, so the names cannot drift apart. The values are the wire's: reward JSON and topic names carry them.
"""

from __future__ import annotations

from typing import Literal

#: One signal about a generation: public-test results, the hidden-test verdict, the judge's score.
Signal = Literal["execution", "verdict", "judgement"]
#: Every signal, in the order a reward lists its inputs and a policy awaits them by default.
SIGNALS: tuple[Signal, ...] = ("execution", "verdict", "judgement")

#: The topic role a signal travels on (its topic is ``<prefix><role>``).
SignalTopic = Literal["executions", "verdicts", "judgements"]
SIGNAL_TOPIC: dict[Signal, SignalTopic] = {"execution": "executions", "verdict": "verdicts", "judgement": "judgements"}
#: The signal topics, in ``SIGNALS`` order: what the reward processor consumes.
SIGNAL_TOPICS: tuple[SignalTopic, ...] = tuple(SIGNAL_TOPIC[s] for s in SIGNALS)

#: A worker role that writes a signal (its consumer group reads the generations).
WriterRole = Literal["executor", "verifier", "judge"]
SIGNAL_WRITER: dict[Signal, WriterRole] = {"execution": "executor", "verdict": "verifier", "judgement": "judge"}
