"""The capacity benchmark's arithmetic: keys spread evenly over the partitions (else the scaling figures measure
the keys' luck), rates from the first output to the last, efficiency against one process."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

from benchmarks.capacity_ceilings import SteadyCpu, cpu_seconds
from benchmarks.capacity_kafka import Timed, balanced_keys
from benchmarks.capacity_scaling import efficiencies
from bus.keys import partition_for


def test_keys_are_distinct_and_spread_evenly_over_the_partitions() -> None:
    keys = balanced_keys(100, 8, "t")
    assert len(set(keys)) == 100
    per_partition = Counter(partition_for(k.encode(), 8) for k in keys)
    assert set(per_partition) == set(range(8))
    assert max(per_partition.values()) - min(per_partition.values()) <= 1


def test_the_rate_counts_the_intervals_between_the_first_and_the_last_output() -> None:
    assert Timed(11, 5.0, 7.0).rate() == 5.0
    assert Timed(1, 5.0, 5.0).rate() == 0.0


def test_efficiency_is_against_one_process_times_the_count() -> None:
    rows = efficiencies([{"processes": 1, "rps": 1.0}, {"processes": 8, "rps": 6.0}], concurrency=2, sleep_s=2.0)
    assert [(r["efficiency"], r["ideal_rps"]) for r in rows] == [(1.0, 1.0), (0.75, 8.0)]
    assert efficiencies([{"processes": 2, "rps": 1.0}], 2, 2.0)[0]["efficiency"] is None


def test_cpu_seconds_reads_a_process_s_user_and_system_time() -> None:
    mine = time.process_time()
    assert 0.0 < cpu_seconds(os.getpid()) <= mine + 0.05  # clock ticks: coarser than process_time


def test_cpu_seconds_of_the_main_thread_leaves_out_the_other_threads() -> None:
    spin_until = time.process_time() + 0.3

    def spin() -> None:
        while time.process_time() < spin_until:
            pass

    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    whole, main = cpu_seconds(os.getpid()), cpu_seconds(os.getpid(), thread=threading.get_native_id())
    assert main < whole - 0.1  # the spinning thread's CPU is the process's, not the main thread's


def test_the_steady_cpu_counts_only_what_was_spent_after_the_first_outputs() -> None:
    spent = SteadyCpu(os.getpid())
    spent.start(10)
    until = time.process_time() + 0.2
    while time.process_time() < until:
        pass
    spent.stop()
    figures = spent.per_output_us("reward", 110)  # 100 outputs after the first 10
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK") / 100  # one clock tick, per output: thread and process tick apart
    whole, main = figures["steady_cpu_us_per_reward"], figures["steady_main_thread_us_per_reward"]
    assert whole is not None
    assert main is not None
    assert 1_500 <= whole <= spent.whole_s / 100 * 1e6
    assert main <= whole + 2 * tick_us
    assert spent.per_output_us("reward", 10) == {  # every output in the first read: no steady state
        "steady_cpu_us_per_reward": None, "steady_main_thread_us_per_reward": None,
    }  # fmt: skip
