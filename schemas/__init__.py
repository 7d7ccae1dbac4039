"""rewardstream contracts: events, tasks, topic catalog, codec, settings and the error hierarchy.

Everything else in rewardstream depends on this package; it depends on nothing else here.
"""
