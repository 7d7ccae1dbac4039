"""The stateful side: the reward processor, the trainer SDK, replay and explain."""
