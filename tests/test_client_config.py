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
