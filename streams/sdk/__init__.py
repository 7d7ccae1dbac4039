"""The trainer SDK: publish generations, get exactly one reward back per generation (sync or asyncio)."""

from __future__ import annotations

from streams.sdk.aio import AsyncTrainerClient
from streams.sdk.client import RewardFuture, RewardTimeoutError, SdkError, TrainerClient, TrainerConfig

__all__ = ["AsyncTrainerClient", "RewardFuture", "RewardTimeoutError", "SdkError", "TrainerClient", "TrainerConfig"]
