"""The HTTP gateway (``rewardstream serve``): a thin, stateless door onto the same Kafka topics.

It speaks the APIs trainers already use (SandboxFusion's ``POST /run_code``, an OpenRLHF-style remote reward)
plus rewardstream's own (``/v1/rewards``), and holds nothing a replica must share: runs go to the executors
as ``RunRequest``s and come back on the replica's own partition of the replies topic; rewards are read from
the rewards topic, so any replica can answer a poll.
"""
