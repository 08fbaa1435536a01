"""A push consumer's settings are checked when it is made: a pause or a size of 0 would make a loop that never
waits (a pull re-sent at once, forever), so it is refused with a clear error before anything starts."""

from __future__ import annotations

import pytest

from txmq.client.consumer import PushConsumer

SETTINGS = ["consume_thread_nums", "pull_batch_size", "consume_batch_max_size", "pull_threshold",
            "rebalance_interval_s", "suspend_timeout_ms", "persist_interval_s", "suspend_s",
            "pull_delay_when_exception_s"]


@pytest.mark.parametrize("name", SETTINGS)
@pytest.mark.parametrize("value", [0, -1])
def test_a_setting_of_zero_or_below_is_refused(name: str, value: int) -> None:
    with pytest.raises(ValueError, match=f"{name} must be above 0"):
        PushConsumer("g", "127.0.0.1:9876", **{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-2, -16, 1 << 31])
def test_max_reconsume_times_below_minus_one_or_beyond_a_java_int_is_refused(value: int) -> None:
    """-1 means RocketMQ's default and 0 no retry; a value below -1 sent every failed message to the dead letters at
    once (the broker compares its retries with it), as 0 does, and one beyond a Java int made each send-back refused
    by the broker (the header field is an ``Integer``), the message retried locally for ever."""
    with pytest.raises(ValueError, match="max_reconsume_times must be"):
        PushConsumer("g", "127.0.0.1:9876", max_reconsume_times=value)


@pytest.mark.parametrize("value", [-1, 0, 16, (1 << 31) - 1])
def test_max_reconsume_times_from_minus_one_to_a_java_int_is_taken(value: int) -> None:
    assert PushConsumer("g", "127.0.0.1:9876", max_reconsume_times=value).max_reconsume_times == value
