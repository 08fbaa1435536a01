"""Topic and group names: the legal-name rule is RocketMQ's ``TopicValidator`` pattern matched against the whole
name, for every character and for names around the length limits. No IO."""

from __future__ import annotations

import re
import sys

import pytest

from txmq.errors import InvalidMessageError
from txmq.topic import GROUP_MAX_LENGTH, TOPIC_MAX_LENGTH, TopicConfig, check_group, check_topic

ROCKETMQ_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")  # Java's Pattern.matches: the whole name


def legal(check, name: str) -> bool:
    try:
        check(name)
    except InvalidMessageError:
        return False
    return True


@pytest.mark.parametrize("check, limit", [(check_topic, TOPIC_MAX_LENGTH), (check_group, GROUP_MAX_LENGTH)])
def test_names_are_legal_exactly_when_rocketmq_s_pattern_matches_all_of_them(check, limit) -> None:
    names = [chr(c) for c in range(0x300)] + [f"orders{chr(c)}" for c in range(0x300)]
    names += ["%RETRY%group_1", "a|b-c_D9", "orders\n", "\norders", "or ders", "ordérs", "\U0001f600", "x" * limit,
              "x" * (limit + 1), "", " ", "\t"]
    for name in names:
        expected = ROCKETMQ_PATTERN.fullmatch(name) is not None and len(name) <= limit
        assert legal(check, name) == expected, repr(name)


def test_a_topic_known_legal_skips_the_pattern_and_an_illegal_one_is_refused_every_time() -> None:
    """``check_topic`` remembers names that passed (bounded): asked again, the same answer without the regex. The
    cache is the process's: earlier tests in this process may have filled it, so the test starts it empty."""
    topic_module = sys.modules[check_topic.__module__]
    saved = topic_module._LEGAL_TOPICS.copy()
    topic_module._LEGAL_TOPICS.clear()
    try:
        assert legal(check_topic, "remembered_topic") and "remembered_topic" in topic_module._LEGAL_TOPICS
        for _ in range(2):
            with pytest.raises(InvalidMessageError, match="illegal characters"):
                check_topic("bad topic")
        assert "bad topic" not in topic_module._LEGAL_TOPICS
        topic_module._LEGAL_TOPICS.update(f"t{i}" for i in range(topic_module._LEGAL_TOPICS_MAX))
        assert len(topic_module._LEGAL_TOPICS) >= topic_module._LEGAL_TOPICS_MAX
        assert legal(check_topic, "one_more_topic") and "one_more_topic" not in topic_module._LEGAL_TOPICS
        assert not legal(check_topic, "x" * (TOPIC_MAX_LENGTH + 1))
    finally:
        topic_module._LEGAL_TOPICS.clear()
        topic_module._LEGAL_TOPICS.update(saved)


def test_a_topic_config_is_rocketmq_s_json_and_reads_back_the_same() -> None:
    cfg = TopicConfig("orders", 4, 2, 6, "MULTI_TAG", 1, True)
    assert cfg.to_json() == {"topicName": "orders", "readQueueNums": 4, "writeQueueNums": 2, "perm": 6,
                             "topicFilterType": "MULTI_TAG", "topicSysFlag": 1, "order": True}
    assert TopicConfig.from_json(cfg.to_json()) == cfg
