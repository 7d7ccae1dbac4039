"""The rewardstream command line: the one place that wires schemas, workers, streams and infra."""
