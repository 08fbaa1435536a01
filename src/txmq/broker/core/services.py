"""The broker core as one object the broker builds once (``BrokerController``) and both protocols' adapters use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from txmq.broker.core.pop import PopService
from txmq.broker.core.pull import PullService
from txmq.broker.core.retry import RetryService
from txmq.broker.core.send import SendService
from txmq.broker.core.topics import TopicService
from txmq.topic import PermName

if TYPE_CHECKING:
    from txmq.broker.client_manager import ConsumerManager
    from txmq.broker.config import BrokerConfig
    from txmq.broker.consumer_offset_manager import ConsumerOffsetManager
    from txmq.broker.schedule import ScheduleMessageService
    from txmq.broker.stats import BrokerStats
    from txmq.broker.subscription_group_manager import SubscriptionGroupManager
    from txmq.broker.timer import TimerMessageStore
    from txmq.broker.topic_config_manager import TopicConfigManager
    from txmq.broker.transaction.service import TransactionalMessageService
    from txmq.store import DefaultMessageStore


class BrokerCore:
    """Topics, sends, retries and dead letters, pulls and pops over one broker's store and managers."""

    def __init__(self, config: BrokerConfig, store: DefaultMessageStore, topic_configs: TopicConfigManager,
                 subscription_groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager,
                 consumers: ConsumerManager, stats: BrokerStats, transactions: TransactionalMessageService,
                 schedule: ScheduleMessageService, timers: TimerMessageStore, store_host: tuple[str, int]) -> None:
        self.topics = TopicService(topic_configs, config)
        self.retries = RetryService(store, self.topics, stats, schedule, consumers, store_host,
                                    groups=subscription_groups)
        self.sends = SendService(config, store, self.topics, stats, transactions, schedule, timers, self.retries)
        self.pulls = PullService(config, store, topic_configs, subscription_groups, stats)
        self.pop = PopService(store, offsets, self.pulls, self.retries, max_states=config.pop_state_max_entries)
        self.permission = PermName.READ_WRITE

    def set_permission(self, permission: int) -> None:
        """Serve ``permission`` (PermName's bits): sends and send-backs refused without write, pulls and pops
        without read. Each path tests one attribute, set here."""
        self.permission = permission
        self.sends.writeable = self.retries.writeable = PermName.is_writeable(permission)
        self.pulls.readable = PermName.is_readable(permission)
