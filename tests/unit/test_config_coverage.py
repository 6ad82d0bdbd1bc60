"""Every declared config key is applied or refused, never accepted and ignored (issue 7).

How the walker works
- Each key declares what klamm does with it, as data next to its declaration
  (`ConfigKey.support` in klamm/config/broker_keys.py and topic_keys.py):
  APPLIED, CLUSTER or UNSUPPORTED, with a one-line reason for the last two.
- APPLIED keys are listed in `APPLIED` below with the pytest node ids of tests
  that show their effect; the walker imports each test module and checks the test
  function exists. A broker key that supplies a topic key's default (a synonym,
  e.g. log.retention.hours for retention.ms) is covered by the topic key's entry
  plus `test_broker_synonym_sets_topic_default[<broker key>]` here.
- UNSUPPORTED keys are set to a value other than their default, and klamm must
  refuse it with a message naming the key: at start-up (`klamm serve` exits 2),
  and on a running broker by CreateTopics / IncrementalAlterConfigs (topic keys,
  INVALID_CONFIG) and IncrementalAlterConfigs on the broker (INVALID_REQUEST, as
  Kafka answers for broker configs since KAFKA-13609).
- CLUSTER keys concern other brokers; a single node accepts them as Kafka with one
  broker does (the walker checks a non-default value starts), except where a value
  cannot be honoured, which start-up refuses (controller.quorum.voters, tested here).
- A declared key in none of these fails `test_every_declared_key_is_applied_or_refused`.

Keys other helpers are implementing on their branches
- `PENDING_FROM_OTHER_BRANCHES` lists them with the helper's name. The walker
  skips them; `test_pending_key_is_covered[<key>]` runs the walker's check for each
  one and is marked xfail(strict=True). While a key is pending its check fails
  (no test in APPLIED), which xfail expects. When the lead merges the branch and
  adds the key's tests to APPLIED, the check passes, and strict xfail turns that
  XPASS into a failure until the key is also removed from PENDING. So the lead
  cannot register a key without also taking it out of the pending list.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klamm.broker.broker import Broker
from klamm.cli.main import load_config, main
from klamm.config.broker import BrokerConfig
from klamm.config.broker_keys import BROKER_CONFIG_DEF
from klamm.config.definition import ConfigKey, ConfigType, LevelRange, OneOf, Range, Support, format_value
from klamm.config.errors import ConfigError
from klamm.config.topic import TopicConfig
from klamm.config.topic_keys import TOPIC_CONFIG_DEF
from klamm.protocol.errors import ErrorCode
from klamm.protocol.records import build_batch
from klamm.testing import EmbeddedBroker, run_broker
from tests.integration.conftest import CREATE_TOPICS, RawClient, create_topic, fetch, produce

INCREMENTAL_ALTER_CONFIGS, TOPIC, BROKER, SET = 44, 2, 4, 0
EFFECTS = "tests/unit/test_config_effects.py"
CONFIG = "tests/unit/test_config.py"
CLEANER = "tests/unit/test_cleaner.py"
RETENTION = "tests/unit/test_retention.py"
STORAGE_LOG = "tests/unit/test_storage_log.py"
GROUPS = "tests/unit/test_group_coordinator.py"
CONSUMER_GROUPS = "tests/unit/test_consumer_group_coordinator.py"
MIGRATION = "tests/unit/test_consumer_group_migration.py"
CONFIGS_API = "tests/integration/test_configs_api.py"
HERE = "tests/unit/test_config_coverage.py"
LISTENERS = "tests/integration/test_listeners.py"
EXPIRY = "tests/integration/test_state_expiration.py"
ADMIN = "tests/integration/test_admin_metadata.py"
SNAPSHOT = "tests/unit/test_controller_snapshot.py"
FLUSH = "tests/integration/test_flush_policy.py"
NETWORK = "tests/integration/test_network_configs.py"
VALIDATION = "tests/unit/test_produce_validation.py"
TOPIC_CONFIGS = "tests/unit/test_produce_topic_configs.py"

# Applied keys -> tests that show the key changes behaviour.
APPLIED: dict[str, list[str]] = {
    # topic keys (their broker synonyms are covered through them)
    "cleanup.policy": [f"{CLEANER}::test_service_cleans_compacted_partitions_only_and_checkpoints",
                       f"{RETENTION}::test_compact_only_policy_ignores_time_and_size"],
    "compression.type": [f"{EFFECTS}::test_topic_compression_type_recompresses"],
    "delete.retention.ms": [f"{EFFECTS}::test_compaction_config_carries_the_topic_cleaner_settings",
                            f"{CLEANER}::test_tombstone_survives_first_cleaning_with_a_delete_horizon_then_goes"],
    "file.delete.delay.ms": [f"{CONFIGS_API}::test_retention_ms_change_deletes_old_segments_in_the_background"],
    "index.interval.bytes": [f"{EFFECTS}::test_log_config_carries_the_topic_storage_settings",
                             "tests/unit/test_storage_index.py::test_log_indexes_are_sparse_in_kafka_format"],
    "max.message.bytes": [f"{CONFIGS_API}::test_max_message_bytes_change_applies_to_produce"],
    "message.timestamp.type": [f"{EFFECTS}::test_message_timestamp_type_log_append_time_stamps_batches"],
    "min.cleanable.dirty.ratio": [f"{EFFECTS}::test_compaction_config_carries_the_topic_cleaner_settings",
                                  f"{CLEANER}::test_dirty_ratio_decides_and_the_dirtiest_log_wins"],
    "min.compaction.lag.ms": [f"{EFFECTS}::test_compaction_config_carries_the_topic_cleaner_settings",
                              f"{CLEANER}::test_min_compaction_lag_leaves_young_segments_dirty"],
    "min.insync.replicas": [f"{EFFECTS}::test_min_insync_replicas_refuses_acks_all"],
    "unclean.leader.election.enable": [
        "tests/unit/test_controller.py::test_unclean_election_default_static_then_cluster_wide_then_topic",
        "tests/unit/test_partition_changes.py::test_unclean_election_when_the_topic_allows_it"],
    "replica.lag.time.max.ms": [
        "tests/integration/test_replication.py::test_acks_all_waits_for_the_isr_and_min_insync_replicas_refuses"],
    "delegation.token.secret.key": [
        "tests/integration/test_delegation_tokens.py::test_a_token_is_created_described_renewed_and_expired",
        "tests/integration/test_delegation_tokens.py::"
        "test_token_requests_are_refused_on_plaintext_and_without_a_secret"],
    "delegation.token.expiry.time.ms": [
        "tests/integration/test_delegation_tokens.py::test_a_token_is_created_described_renewed_and_expired"],
    "delegation.token.max.lifetime.ms": [
        "tests/integration/test_delegation_tokens.py::test_the_controller_removes_expired_tokens"],
    "delegation.token.expiry.check.interval.ms": [
        "tests/integration/test_delegation_tokens.py::test_the_controller_removes_expired_tokens"],
    "replica.selector.class": [
        "tests/integration/test_fetch_from_follower.py::test_the_leader_names_a_follower_in_the_consumers_rack",
        "tests/integration/test_fetch_from_follower.py::test_a_consumer_with_client_rack_reads_from_the_follower_in_its_rack"],
    "process.roles": ["tests/interop/test_cluster_processes.py::test_three_processes_replicate_and_fail_over",
                      "tests/unit/test_config_coverage.py::test_kraft_roles_and_quorum_are_checked"],
    "controller.listener.names": [
        "tests/interop/test_cluster_processes.py::test_three_processes_replicate_and_fail_over"],
    "controller.quorum.voters": [
        "tests/interop/test_cluster_processes.py::test_three_processes_replicate_and_fail_over",
        "tests/unit/test_config_coverage.py::test_kraft_roles_and_quorum_are_checked"],
    **{f"controller.quorum.{name}": ["tests/unit/test_raft_wiring.py::test_quorum_configs_reach_the_raft_node"]
       for name in ("election.timeout.ms", "fetch.timeout.ms", "election.backoff.max.ms", "request.timeout.ms",
                    "retry.backoff.ms", "append.linger.ms")},
    "broker.session.timeout.ms": [
        "tests/interop/test_cluster_processes.py::test_three_processes_replicate_and_fail_over"],
    "broker.heartbeat.interval.ms": [
        "tests/interop/test_cluster_processes.py::test_three_processes_replicate_and_fail_over"],
    "auto.leader.rebalance.enable": [
        "tests/integration/test_replication.py::test_leadership_returns_to_the_preferred_replica"],
    "leader.imbalance.check.interval.seconds": [
        "tests/integration/test_replication.py::test_leadership_returns_to_the_preferred_replica"],
    "offsets.commit.timeout.ms": [
        "tests/integration/test_replication.py::test_a_commit_the_isr_does_not_take_in_time_is_not_acknowledged"],
    "retention.bytes": [f"{EFFECTS}::test_log_config_carries_the_topic_storage_settings",
                        f"{RETENTION}::test_size_retention_deletes_oldest_while_the_excess_covers_them"],
    "retention.ms": [f"{EFFECTS}::test_log_config_carries_the_topic_storage_settings",
                     f"{RETENTION}::test_time_retention_deletes_segments_older_than_retention_ms",
                     f"{CONFIGS_API}::test_retention_ms_change_deletes_old_segments_in_the_background"],
    "segment.bytes": [f"{EFFECTS}::test_log_config_carries_the_topic_storage_settings",
                      f"{STORAGE_LOG}::test_round_trip_across_many_segments"],
    "segment.index.bytes": [f"{EFFECTS}::test_log_config_carries_the_topic_storage_settings",
                            f"{STORAGE_LOG}::test_roll_when_offset_index_is_full"],
    "segment.ms": [f"{EFFECTS}::test_log_config_carries_the_topic_storage_settings",
                   f"{STORAGE_LOG}::test_roll_on_segment_ms_by_record_timestamps"],
    "internal.segment.bytes": [f"{EFFECTS}::test_log_config_carries_the_topic_storage_settings"],
    # broker keys
    "node.id": [f"{EFFECTS}::test_node_id_cluster_id_and_advertised_listener_reach_metadata"],
    "broker.id": [f"{CONFIG}::test_broker_id_and_node_id"],
    "cluster.id": [f"{EFFECTS}::test_node_id_cluster_id_and_advertised_listener_reach_metadata",
                   f"{EFFECTS}::test_log_dirs_hold_the_data",
                   f"{EFFECTS}::test_cluster_id_that_disagrees_with_the_data_stops_start_up"],
    "auto.create.topics.enable": [f"{EFFECTS}::test_auto_create_topics_enable_false_creates_nothing"],
    "ssl.keystore.type": ["tests/integration/test_tls.py::test_what_cannot_work_is_refused_with_the_reason"],
    "ssl.keystore.location": ["tests/integration/test_tls.py::test_clients_verify_the_broker_and_fetch_the_same_bytes"],
    "ssl.keystore.password": ["tests/integration/test_tls.py::test_an_encrypted_private_key_opens_with_its_password"],
    "ssl.key.password": ["tests/integration/test_tls.py::test_an_encrypted_private_key_opens_with_its_password"],
    "ssl.keystore.key": ["tests/integration/test_tls.py::test_inline_pem_stores_and_the_tls_versions_enabled"],
    "ssl.keystore.certificate.chain": ["tests/integration/test_tls.py::test_inline_pem_stores_and_the_tls_versions_enabled"],
    "ssl.truststore.type": ["tests/integration/test_tls.py::test_what_cannot_work_is_refused_with_the_reason"],
    "ssl.truststore.location": ["tests/integration/test_tls.py::test_mutual_tls_admits_only_certificates_of_the_trusted_ca"],
    "ssl.truststore.password": ["tests/integration/test_tls.py::test_what_cannot_work_is_refused_with_the_reason"],
    "ssl.truststore.certificates": ["tests/integration/test_tls.py::test_inline_pem_stores_and_the_tls_versions_enabled"],
    "quota.window.num": ["tests/integration/test_quota_enforcement.py::test_a_producer_over_its_byte_rate_is_slowed_to_it",
                         "tests/unit/test_quotas.py::test_the_bucket_starts_full_and_fills_at_the_quota"],
    "quota.window.size.seconds": [
        "tests/integration/test_quota_enforcement.py::test_a_producer_over_its_byte_rate_is_slowed_to_it"],
    "ssl.principal.mapping.rules": ["tests/integration/test_tls.py::test_ssl_principal_mapping_rules",
                                    "tests/integration/test_tls.py::test_a_certificate_no_rule_maps_is_refused"],
    "ssl.client.auth": ["tests/integration/test_tls.py::test_mutual_tls_admits_only_certificates_of_the_trusted_ca"],
    "ssl.enabled.protocols": ["tests/integration/test_tls.py::test_inline_pem_stores_and_the_tls_versions_enabled"],
    "ssl.protocol": ["tests/integration/test_tls.py::test_what_cannot_work_is_refused_with_the_reason"],
    "message.downconversion.enable": [
        "tests/integration/test_legacy_offsets.py::test_message_downconversion_enable_false_refuses_fetches_that_need_it"],
    "log.message.downconversion.enable": [
        "tests/integration/test_legacy_offsets.py::test_message_downconversion_enable_false_refuses_fetches_that_need_it"],
    "max.request.partition.size.limit": [
        "tests/integration/test_describe_topic_partitions.py::test_max_request_partition_size_limit_caps_the_page"],
    "max.incremental.fetch.session.cache.slots": [
        "tests/integration/test_fetch_sessions.py::test_full_cache_answers_sessionless"],
    "metrics.port": [f"{EFFECTS}::test_metrics_host_and_port_bind_the_endpoint",
                     "tests/unit/test_metrics.py::test_endpoint_serves_and_stops_with_the_broker"],
    "metrics.host": [f"{EFFECTS}::test_metrics_host_and_port_bind_the_endpoint"],
    "listeners": [f"{EFFECTS}::test_node_id_cluster_id_and_advertised_listener_reach_metadata",
                  f"{HERE}::test_listeners_klamm_cannot_serve_are_refused",
                  f"{LISTENERS}::test_each_listener_serves_its_clients_and_advertises_its_own_port"],
    "advertised.listeners": [f"{EFFECTS}::test_node_id_cluster_id_and_advertised_listener_reach_metadata",
                             f"{LISTENERS}::test_advertised_listeners_give_each_listener_its_host"],
    "listener.security.protocol.map": [f"{HERE}::test_listeners_klamm_cannot_serve_are_refused"],
    "inter.broker.listener.name": [f"{HERE}::test_the_inter_broker_listener_is_checked",
                                   f"{LISTENERS}::test_a_cluster_serves_sasl_clients_and_replicates_in_plaintext"],
    "security.inter.broker.protocol": [f"{HERE}::test_the_inter_broker_listener_is_checked"],
    "sasl.mechanism.inter.broker.protocol": [
        "tests/integration/test_inter_broker_security.py::test_brokers_replicate_over_sasl_ssl_and_register_over_sasl",
        "tests/integration/test_inter_broker_security.py::test_what_a_node_cannot_authenticate_with_is_refused_at_start"],
    "sasl.mechanism.controller.protocol": [
        "tests/integration/test_inter_broker_security.py::test_brokers_replicate_over_sasl_ssl_and_register_over_sasl",
        "tests/integration/test_inter_broker_security.py::test_what_a_node_cannot_authenticate_with_is_refused_at_start"],
    "ssl.endpoint.identification.algorithm": [
        "tests/integration/test_inter_broker_security.py::test_a_host_name_the_certificate_does_not_name_is_refused"],
    "socket.request.max.bytes": ["tests/integration/test_bad_input.py::test_frame_over_max_request_size_disconnects"],
    "connections.max.idle.ms": ["tests/integration/test_connections.py::test_idle_connection_is_closed"],
    "sasl.enabled.mechanisms": ["tests/integration/test_sasl_listeners.py::test_an_unauthenticated_connection_gets_only_the_handshake",
                                "tests/integration/test_sasl_listeners.py::test_what_cannot_work_is_refused_at_start"],
    "sasl.server.max.receive.size": [
        "tests/integration/test_sasl_listeners.py::test_an_unauthenticated_connection_gets_only_the_handshake"],
    "connections.max.reauth.ms": ["tests/integration/test_sasl_listeners.py::test_reauthentication_keeps_the_connection"],
    "authorizer.class.name": ["tests/integration/test_acl_apis.py::test_alice_without_alter_on_the_cluster_is_refused",
                              "tests/integration/test_acl_apis.py::test_without_an_authorizer_security_is_disabled"],
    "super.users": ["tests/integration/test_acl_apis.py::test_create_describe_and_delete_with_the_admin_client",
                    "tests/integration/test_acl_apis.py::test_acls_made_at_a_broker_only_node_show_everywhere"],
    "allow.everyone.if.no.acl.found": ["tests/integration/test_acl_apis.py::test_allow_everyone_if_no_acl_found_lets_anyone_alter_acls"],
    "sasl.oauthbearer.jwks.endpoint.url": [
        "tests/integration/test_sasl_oauthbearer.py::test_signed_tokens_with_librdkafka",
        "tests/integration/test_sasl_oauthbearer.py::test_what_cannot_work_is_refused_at_start",
        "tests/unit/test_oauthbearer.py::test_secured_listener_with_a_jwks_file"],
    "sasl.oauthbearer.jwks.endpoint.refresh.ms": [
        "tests/unit/test_oauthbearer.py::test_what_cannot_work_is_refused",
        "tests/unit/test_oauthbearer.py::test_jwks_cache_refresh_policy"],
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": [
        "tests/unit/test_oauthbearer.py::test_http_jwks_fetch_retries_with_backoff"],
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": [
        "tests/unit/test_oauthbearer.py::test_http_jwks_fetch_retries_with_backoff"],
    "sasl.oauthbearer.expected.audience": [
        "tests/integration/test_sasl_oauthbearer.py::test_bad_tokens_are_refused_with_kafkas_json",
        "tests/unit/test_oauthbearer.py::test_secured_listener_with_a_jwks_file"],
    "sasl.oauthbearer.expected.issuer": [
        "tests/integration/test_sasl_oauthbearer.py::test_bad_tokens_are_refused_with_kafkas_json",
        "tests/unit/test_oauthbearer.py::test_secured_listener_with_a_jwks_file"],
    "sasl.oauthbearer.sub.claim.name": [
        "tests/unit/test_oauthbearer.py::test_the_3x_handler_name_and_listener_prefixed_keys"],
    "sasl.oauthbearer.scope.claim.name": [
        "tests/unit/test_oauthbearer.py::test_the_3x_handler_name_and_listener_prefixed_keys"],
    "sasl.oauthbearer.clock.skew.seconds": [
        "tests/unit/test_oauthbearer.py::test_the_3x_handler_name_and_listener_prefixed_keys",
        "tests/unit/test_oauthbearer.py::test_clock_skew"],
    "num.partitions": [f"{EFFECTS}::test_num_partitions_and_default_replication_factor_apply_to_new_topics"],
    "default.replication.factor": [
        f"{EFFECTS}::test_num_partitions_and_default_replication_factor_apply_to_new_topics"],
    "log.dir": [f"{CONFIG}::test_log_dirs_falls_back_to_log_dir", f"{EFFECTS}::test_log_dirs_hold_the_data"],
    "log.dirs": [f"{EFFECTS}::test_log_dirs_hold_the_data"],
    "log.retention.check.interval.ms": [
        f"{CONFIGS_API}::test_retention_ms_change_deletes_old_segments_in_the_background"],
    "log.cleaner.enable": [f"{EFFECTS}::test_cleaner_enable_false_starts_no_worker"],
    "log.cleaner.threads": [f"{EFFECTS}::test_cleaner_threads_buffer_and_load_factor"],
    "log.cleaner.dedupe.buffer.size": [f"{EFFECTS}::test_cleaner_threads_buffer_and_load_factor"],
    "log.cleaner.io.buffer.load.factor": [f"{EFFECTS}::test_cleaner_threads_buffer_and_load_factor"],
    "log.cleaner.backoff.ms": [f"{EFFECTS}::test_cleaner_backoff_ms_is_the_idle_sleep"],
    "log.flush.offset.checkpoint.interval.ms": [f"{EFFECTS}::test_recovery_points_are_checkpointed_every_interval"],
    "offsets.topic.num.partitions": [f"{EFFECTS}::test_offsets_topic_partitions_and_segment_bytes"],
    "offsets.topic.segment.bytes": [f"{EFFECTS}::test_offsets_topic_partitions_and_segment_bytes"],
    "offsets.retention.minutes": [f"{EFFECTS}::test_coordinator_config_follows_broker_config",
                                  f"{GROUPS}::test_retention_expires_offsets_of_empty_groups"],
    "offsets.retention.check.interval.ms": [f"{EFFECTS}::test_coordinator_config_follows_broker_config",
                                            f"{GROUPS}::test_retention_expires_offsets_of_empty_groups"],
    "offset.metadata.max.bytes": [f"{EFFECTS}::test_coordinator_config_follows_broker_config",
                                  f"{GROUPS}::test_offset_commit_and_fetch"],
    "group.initial.rebalance.delay.ms": [f"{EFFECTS}::test_coordinator_config_follows_broker_config",
                                         f"{GROUPS}::test_initial_rebalance_delay_waits_for_more_members"],
    "group.min.session.timeout.ms": [f"{EFFECTS}::test_coordinator_config_follows_broker_config",
                                     f"{GROUPS}::test_invalid_session_timeout_and_group_id"],
    "group.max.session.timeout.ms": [f"{EFFECTS}::test_coordinator_config_follows_broker_config",
                                     f"{EFFECTS}::test_group_max_size_and_session_timeout_bounds"],
    "group.max.size": [f"{EFFECTS}::test_coordinator_config_follows_broker_config",
                       f"{EFFECTS}::test_group_max_size_and_session_timeout_bounds"],
    "group.consumer.session.timeout.ms": [f"{CONSUMER_GROUPS}::test_consumer_config_follows_broker_config",
                                          f"{CONSUMER_GROUPS}::test_session_expiry_fences_a_silent_member"],
    "group.consumer.heartbeat.interval.ms": [f"{CONSUMER_GROUPS}::test_consumer_config_follows_broker_config"],
    "group.consumer.assignors": [f"{CONSUMER_GROUPS}::test_consumer_config_follows_broker_config"],
    "group.consumer.max.size": [f"{CONSUMER_GROUPS}::test_consumer_config_follows_broker_config"],
    **{key: [f"{MIGRATION}::test_migration_policy_and_timeout_bounds_follow_broker_config"]
       for key in ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms",
                   "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms")},
    "group.consumer.migration.policy": [f"{MIGRATION}::test_migration_policy_and_timeout_bounds_follow_broker_config",
                                        f"{MIGRATION}::test_migration_policy_decides"],
    "transaction.state.log.num.partitions": [
        f"{EFFECTS}::test_transaction_state_topic_partitions_and_segment_bytes"],
    "transaction.state.log.segment.bytes": [f"{EFFECTS}::test_transaction_state_topic_partitions_and_segment_bytes"],
    "transaction.max.timeout.ms": [f"{EFFECTS}::test_transaction_max_timeout_ms_bounds_init_producer_id"],
    "transaction.partition.verification.enable": [f"{EFFECTS}::test_transaction_partition_verification_enable"],
    "transactional.id.expiration.ms": [f"{EXPIRY}::test_transactional_ids_expire_and_stay_gone_after_restart",
                                       "tests/unit/test_transactions.py::test_idle_transactional_ids_expire_with_tombstones"],
    "transaction.remove.expired.transaction.cleanup.interval.ms": [
        f"{EXPIRY}::test_transactional_ids_expire_and_stay_gone_after_restart"],
    "producer.id.expiration.ms": [f"{EXPIRY}::test_idle_producer_ids_expire",
                                  "tests/unit/test_storage_producer_state.py::test_idle_producers_expire_by_their_last_batch_timestamp"],
    "producer.id.expiration.check.interval.ms": [f"{EXPIRY}::test_idle_producer_ids_expire"],
    "message.timestamp.after.max.ms": [f"{VALIDATION}::test_record_ten_years_in_the_future_is_invalid_timestamp"],
    "message.timestamp.before.max.ms": [f"{VALIDATION}::test_before_max_ms_refuses_old_records_and_names_each",
                                        f"{VALIDATION}::test_broker_level_setting_is_the_topic_default"],
    "max.compaction.lag.ms": [f"{TOPIC_CONFIGS}::test_max_compaction_lag_rolls_the_active_segment_by_record_time",
                              f"{TOPIC_CONFIGS}::test_max_compaction_lag_rolls_by_wall_clock_without_timestamps"],
    "compression.gzip.level": [f"{TOPIC_CONFIGS}::test_recompression_uses_the_topic_level"],
    "compression.zstd.level": [f"{TOPIC_CONFIGS}::test_recompression_uses_the_topic_level"],
    "compression.lz4.level": [f"{TOPIC_CONFIGS}::test_recompression_uses_the_topic_level"],
    "log.cleaner.io.max.bytes.per.second": [
        "tests/unit/test_cleaner_throttle.py::test_the_cleaner_process_is_held_to_the_configured_rate",
        "tests/unit/test_cleaner_throttle.py::test_service_shares_one_budget_from_the_broker_config"],
    "fetch.max.bytes": [f"{NETWORK}::test_fetch_max_bytes_caps_a_fetch"],
    "queued.max.requests": [f"{NETWORK}::test_queued_requests_are_bounded_across_connections"],
    "queued.max.request.bytes": [f"{NETWORK}::test_queued_requests_are_bounded_across_connections",
                                 f"{NETWORK}::test_kafka_start_up_checks"],
    "socket.send.buffer.bytes": [f"{NETWORK}::test_socket_buffer_sizes"],
    "socket.receive.buffer.bytes": [f"{NETWORK}::test_socket_buffer_sizes"],
    "socket.listen.backlog.size": [f"{NETWORK}::test_listen_backlog"],
    "max.connections": [f"{NETWORK}::test_max_connections_stops_accepting_until_one_closes"],
    "max.connections.per.ip": [f"{NETWORK}::test_max_connections_per_ip_closes_the_extra_connection"],
    "max.connections.per.ip.overrides": [f"{NETWORK}::test_max_connections_per_ip_overrides"],
    "num.network.threads": [f"{NETWORK}::test_num_network_threads_processors_share_the_connections"],
    "flush.ms": [f"{FLUSH}::test_the_scheduled_flusher_fsyncs_data_older_than_flush_ms",
                 "tests/unit/test_log_flusher.py::test_scheduled_pass_flushes_logs_whose_unflushed_data_waited_flush_ms"],
    "flush.messages": [f"{FLUSH}::test_flush_messages_1_acks_only_after_the_fsync_and_producers_share_fsyncs",
                       f"{FLUSH}::test_default_policy_acks_from_the_page_cache"],
    "log.flush.scheduler.interval.ms": [f"{FLUSH}::test_the_scheduled_flusher_fsyncs_data_older_than_flush_ms"],
    "delete.topic.enable": [f"{ADMIN}::test_delete_topics_refused_when_deletion_disabled",
                            f"{ADMIN}::test_delete_topics_allowed_by_default"],
    "broker.rack": [f"{ADMIN}::test_broker_rack_is_registered_and_reported"],
    "metadata.log.max.record.bytes.between.snapshots": [f"{SNAPSHOT}::test_snapshots_are_taken_after_enough_record_bytes"],
    "metadata.log.max.snapshot.interval.ms": [f"{SNAPSHOT}::test_snapshots_are_taken_after_the_interval"],
    "metadata.max.retention.bytes": [f"{SNAPSHOT}::test_log_behind_a_snapshot_is_deleted_once_retention_is_exceeded",
                                     f"{SNAPSHOT}::test_log_is_kept_while_within_retention"],
    "metadata.max.retention.ms": [f"{SNAPSHOT}::test_retention_by_age_deletes_before_the_next_snapshot"],
    "metadata.log.segment.bytes": [f"{ADMIN}::test_broker_snapshots_metadata_and_restarts_from_the_snapshot"],
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": [
        "tests/integration/test_coordinator_failures.py::test_failed_timeout_abort_is_retried_until_the_lso_moves"],
}

# ------------------------------------------------------------------------------------------------
# PENDING: keys other helpers are implementing on their branches. When merging a branch, move its
# keys from here to APPLIED with the node ids of the tests that show their effect (see the module
# docstring: test_pending_key_is_covered fails while a key is in both). A broker key that supplies a
# topic key's default (log.flush.interval.ms for flush.ms, ...) needs no APPLIED entry of its own: it is
# covered through the topic key's, so just remove it from here.
PENDING_FROM_OTHER_BRANCHES: dict[str, str] = {
    # statemem also adds the metadata.log.* snapshot keys; not declared on main, so once its branch
    # declares them the walker fails until they are listed in APPLIED (or here, under their real names).
}
# ------------------------------------------------------------------------------------------------

DECLARED: list[tuple[str, ConfigKey]] = [("broker", k) for k in BROKER_CONFIG_DEF] + [("topic", k) for k in TOPIC_CONFIG_DEF]
TOPIC_OF_SYNONYM: dict[str, ConfigKey] = {s.name: key for key in TOPIC_CONFIG_DEF for s in key.synonyms}


def _id(kind_key: tuple[str, ConfigKey]) -> str:
    return f"{kind_key[0]}:{kind_key[1].name}"


def missing_test(node_id: str) -> str | None:
    """None if `node_id` (path::function[params]) names a test function that exists, else why not."""
    path, _, name = node_id.partition("::")
    if not Path(path).is_file():
        return f"{node_id}: no such file"
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    function = getattr(module, name.partition("[")[0], None)
    if not callable(function) or not function.__name__.startswith("test"):
        return f"{node_id}: no such test"
    return None


def coverage_problem(kind: str, key: ConfigKey) -> str | None:
    """Why `key` is neither applied with a test showing it nor refused (None: it is one of them)."""
    if key.support is not Support.APPLIED:
        return None if key.note else f"{key.name} is {key.support.value} without a reason"
    if kind == "broker" and key.name in TOPIC_OF_SYNONYM:
        topic_key = TOPIC_OF_SYNONYM[key.name]
        problem = coverage_problem("topic", topic_key)
        return f"{key.name} supplies {topic_key.name}'s default, but: {problem}" if problem else None
    node_ids = APPLIED.get(key.name)
    if not node_ids:
        return f"{key.name} is declared APPLIED but no test in APPLIED shows its effect"
    problems = [p for p in map(missing_test, node_ids) if p]
    return "; ".join(problems) or None


@pytest.mark.parametrize("kind_key", [kk for kk in DECLARED if kk[1].name not in PENDING_FROM_OTHER_BRANCHES], ids=_id)
def test_every_declared_key_is_applied_or_refused(kind_key: tuple[str, ConfigKey]) -> None:
    problem = coverage_problem(*kind_key)
    assert problem is None, problem


@pytest.mark.parametrize("name", sorted(PENDING_FROM_OTHER_BRANCHES))
@pytest.mark.xfail(strict=True, reason="implemented on another helper's branch; move the key to APPLIED when merging")
def test_pending_key_is_covered(name: str) -> None:
    declared = [kk for kk in DECLARED if kk[1].name == name]
    assert declared, f"{name} is not declared yet"
    for kind, key in declared:
        assert name in APPLIED or key.support is not Support.APPLIED, f"{name}: no test in APPLIED yet"
        problem = coverage_problem(kind, key)
        assert problem is None, problem


def test_registry_names_only_declared_applied_keys() -> None:
    declared = {key.name: key for _, key in DECLARED}
    stray = [name for name in APPLIED if name not in declared or declared[name].support is not Support.APPLIED]
    assert not stray, f"APPLIED lists keys that are not declared as applied: {stray}"
    assert not set(APPLIED) & set(PENDING_FROM_OTHER_BRANCHES)


def test_broker_synonyms_share_their_topic_key_support() -> None:
    """A broker default of a topic key is applied or refused exactly as the topic key is."""
    mismatched = [(name, BROKER_CONFIG_DEF[name].support, key.support) for name, key in TOPIC_OF_SYNONYM.items()
                  if BROKER_CONFIG_DEF[name].support is not key.support]
    assert not mismatched


def test_the_walker_can_fail() -> None:
    """An applied key without a registered test, or with a test that does not exist, is reported."""
    bare = ConfigKey("made.up.key", ConfigType.INT, 1, BROKER_CONFIG_DEF["num.partitions"].importance, "doc")
    assert "no test in APPLIED" in coverage_problem("broker", bare)
    APPLIED["made.up.key"] = [f"{EFFECTS}::test_that_does_not_exist"]
    try:
        assert "no such test" in coverage_problem("broker", bare)
    finally:
        del APPLIED["made.up.key"]


# -- non-default values ---------------------------------------------------------------------------


def non_default(key: ConfigKey) -> str:
    """A valid raw value other than the key's default (and other than what an unsupported key accepts)."""
    for raw in _candidates(key):
        try:
            value = key.parse(raw)
        except ConfigError:
            continue
        if key.refusal(value) is not None or (key.support is not Support.UNSUPPORTED and value != key.default):
            return raw
    raise AssertionError(f"no non-default sample value for {key.name}")


def _candidates(key: ConfigKey) -> Iterator[str]:
    if isinstance(key.validator, OneOf):
        yield from key.validator.options
    if key.type is ConfigType.BOOLEAN:
        yield "false" if key.default else "true"
    if key.type in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        base = key.default if isinstance(key.default, int) else 0
        low = key.validator.min if isinstance(key.validator, (Range, LevelRange)) else None
        for value in (base + 1, base - 1, low, 1, 1000):
            if value is not None:
                yield str(value)
    if key.type is ConfigType.DOUBLE:
        yield from ("0.25", "1000.0")
    if key.type in (ConfigType.STRING, ConfigType.CLASS):
        yield "com.example.NotInKlamm"
    if key.type is ConfigType.LIST:
        yield "x"


# -- UNSUPPORTED keys are refused -------------------------------------------------------------------

UNSUPPORTED_BROKER = [k for k in BROKER_CONFIG_DEF if k.support is Support.UNSUPPORTED]
UNSUPPORTED_TOPIC = [k for k in TOPIC_CONFIG_DEF if k.support is Support.UNSUPPORTED]


def _assert_clear(message: str | None, key: ConfigKey) -> None:
    assert message is not None and key.name in message and key.note in message, message


@pytest.mark.parametrize("key", UNSUPPORTED_BROKER, ids=lambda k: k.name)
def test_unsupported_broker_key_is_refused_at_start_up(key: ConfigKey, capsys, tmp_path) -> None:
    raw = non_default(key)
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_properties({key.name: raw})
    _assert_clear(str(refused.value), key)
    # the default, and what the key also accepts, start
    for ok in (key.default, *key.accepts):
        if ok is not None:
            BrokerConfig.from_properties({key.name: format_value(key.type, ok)})
    # klamm serve: exit code 2 and the reason on stderr
    assert main(["serve", "--override", f"log.dirs={tmp_path}", "--override", f"{key.name}={raw}"]) == 2
    _assert_clear(capsys.readouterr().err, key)


@pytest.mark.parametrize("key", UNSUPPORTED_TOPIC, ids=lambda k: k.name)
def test_unsupported_topic_key_is_refused_by_validation(key: ConfigKey) -> None:
    with pytest.raises(ConfigError) as refused:
        TopicConfig.validate(BrokerConfig.from_properties({}), {key.name: non_default(key)})
    _assert_clear(str(refused.value), key)
    TopicConfig.validate(BrokerConfig.from_properties({}), {key.name: format_value(key.type, key.default)})


@pytest.fixture(scope="module")
def running() -> Iterator[EmbeddedBroker]:
    with run_broker() as b:
        yield b


@pytest.fixture
def client(running: EmbeddedBroker) -> Iterator[RawClient]:
    with RawClient(running.port) as c:
        yield c


def incremental_set(client: RawClient, resource_type: int, name: str, key: str, value: str) -> Any:
    response = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": resource_type, "resource_name": name,
         "configs": [{"name": key, "config_operation": SET, "value": value}]}]})
    return response.responses[0]


@pytest.mark.parametrize("key", UNSUPPORTED_TOPIC, ids=lambda k: k.name)
def test_unsupported_topic_key_is_refused_by_create_topics_and_alter_configs(key: ConfigKey, client) -> None:
    raw = non_default(key)
    response = client.request(CREATE_TOPICS, 7, {"timeout": 10_000, "topics": [
        {"name": f"refused-{key.name}", "num_partitions": 1, "replication_factor": 1,
         "configs": [{"name": key.name, "value": raw}]}]})
    [created] = response.topics
    assert created.error_code == ErrorCode.invalid_config
    _assert_clear(created.error_message, key)
    create_topic(client, f"altered-{key.name}")
    altered = incremental_set(client, TOPIC, f"altered-{key.name}", key.name, raw)
    assert altered.error_code == ErrorCode.invalid_config
    _assert_clear(altered.error_message, key)


@pytest.mark.parametrize("key", UNSUPPORTED_BROKER, ids=lambda k: k.name)
def test_unsupported_broker_key_is_refused_by_alter_configs(key: ConfigKey, client, running) -> None:
    for resource in ("", str(running.broker.node_id)):
        altered = incremental_set(client, BROKER, resource, key.name, non_default(key))
        assert altered.error_code == ErrorCode.invalid_request
        assert key.name in altered.error_message


# -- CLUSTER keys: accepted as Kafka with one broker accepts them, unless a node cannot honour them ---

CHECKED_AT_START_UP: set[str] = set()


@pytest.mark.parametrize("key", [k for k in BROKER_CONFIG_DEF if k.support is Support.CLUSTER
                                 and k.name not in CHECKED_AT_START_UP], ids=lambda k: k.name)
def test_cluster_key_is_accepted_on_a_single_node(key: ConfigKey) -> None:
    raw = non_default(key)
    assert BrokerConfig.from_properties({key.name: raw}).value_of(key.name) == key.parse(raw)


@pytest.mark.parametrize("key", [k for k in TOPIC_CONFIG_DEF if k.support is Support.CLUSTER], ids=lambda k: k.name)
def test_cluster_topic_key_is_accepted_on_a_single_node(key: ConfigKey) -> None:
    raw = non_default(key)
    assert TopicConfig.validate(BrokerConfig.from_properties({}), {key.name: raw}).value_of(key.name) == key.parse(raw)


def test_kraft_roles_and_quorum_are_checked() -> None:
    assert BrokerConfig.from_properties({"node.id": "3", "controller.quorum.voters": "3@localhost:9093"})
    assert BrokerConfig.from_properties({"node.id": "3", "controller.quorum.voters": "3@a:9093,4@b:9093"})
    with pytest.raises(ConfigError, match="node 3 is not"):
        BrokerConfig.from_properties({"node.id": "3", "controller.quorum.voters": "4@b:9093"})
    with pytest.raises(ConfigError, match="id@host:port"):
        BrokerConfig.from_properties({"controller.quorum.voters": "localhost:9093"})
    broker = {"process.roles": "broker", "node.id": "2", "controller.quorum.voters": "1@localhost:9093",
              "controller.listener.names": "CONTROLLER"}
    assert BrokerConfig.from_properties(broker).process_roles == ["broker"]
    with pytest.raises(ConfigError, match="needs controller.quorum.voters"):
        BrokerConfig.from_properties({**broker, "controller.quorum.voters": ""})
    with pytest.raises(ConfigError, match="the node id 1 must not be included"):
        BrokerConfig.from_properties({**broker, "node.id": "1"})
    with pytest.raises(ConfigError, match="controller.listener.names must contain at least one value"):
        BrokerConfig.from_properties({**broker, "controller.listener.names": ""})
    controller = {"process.roles": "controller", "node.id": "1", "controller.quorum.voters": "1@localhost:9093",
                  "controller.listener.names": "CONTROLLER", "listeners": "CONTROLLER://:9093",
                  "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"}
    assert BrokerConfig.from_properties(controller).process_roles == ["controller"]
    with pytest.raises(ConfigError, match="node 2 is not"):
        BrokerConfig.from_properties({**controller, "node.id": "2"})
    quorum = {**controller, "controller.quorum.voters": "1@localhost:9093,2@localhost:9094,3@localhost:9095"}
    assert BrokerConfig.from_properties(quorum).controller_quorum_voters[2] == "3@localhost:9095"
    assert BrokerConfig.from_properties({**quorum, "node.id": "3"}).node_id == 3
    with pytest.raises(ConfigError, match="the node id 3 must not be included"):
        BrokerConfig.from_properties({**broker, "node.id": "3", "controller.quorum.voters": quorum[
            "controller.quorum.voters"]})
    with pytest.raises(ConfigError, match="must only contain KRaft controller listeners"):
        BrokerConfig.from_properties({**controller, "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
                                      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"})
    with pytest.raises(ConfigError, match="needs controller.quorum.voters naming this node"):
        BrokerConfig.from_properties({**controller, "controller.quorum.voters": ""})
    with pytest.raises(ConfigError, match="must not contain a value appearing in the 'listeners'"):
        BrokerConfig.from_properties({**broker, "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
                                      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"})


def test_listeners_klamm_cannot_serve_are_refused() -> None:
    with pytest.raises(ConfigError, match="listener PLAINTEXT uses KERBEROS, which is not a security protocol"):
        BrokerConfig.from_properties({"listener.security.protocol.map": "PLAINTEXT:KERBEROS"})
    broker_only = {"process.roles": "broker", "node.id": "2", "controller.quorum.voters": "1@127.0.0.1:9094",
                   "controller.listener.names": "CONTROLLER"}
    # a broker of a cluster: the inter-broker listener (PLAINTEXT unless named) must be one of its own
    with pytest.raises(ConfigError, match="inter.broker.listener.name must be a listener name defined in "
                                          "advertised.listeners. The valid options .* are SASL_SSL"):
        BrokerConfig.from_properties({"listeners": "SASL_SSL://:9093", **broker_only})
    served = BrokerConfig.from_properties({"listeners": "SSL://:9093,PLAINTEXT://:9092,SASL_SSL://:9094",
                                           **broker_only})
    assert [name for name, _, _ in served.client_listeners()] == ["SSL", "PLAINTEXT", "SASL_SSL"]
    assert served.inter_broker_listener == "PLAINTEXT"
    assert BrokerConfig.from_properties({"listeners": "SSL://:9093"}).listeners == ["SSL://:9093"]  # one node
    with pytest.raises(ConfigError, match="No security protocol defined for listener CLIENT"):
        BrokerConfig.from_properties({"listeners": "CLIENT://:9092"})
    # Kafka's CoreUtils.listenerListToEndPoints: names and ports once (port 0 aside)
    with pytest.raises(ConfigError, match="Each listener must have a different name, listeners: "
                                          "PLAINTEXT://:9092,PLAINTEXT://:9093"):
        BrokerConfig.from_properties({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"})
    with pytest.raises(ConfigError, match="Each listener must have a different port, listeners: "
                                          "PLAINTEXT://:9092,SSL://:9092, port: 9092"):
        BrokerConfig.from_properties({"listeners": "PLAINTEXT://:9092,SSL://:9092"})
    two = BrokerConfig.from_properties({"listeners": "PLAINTEXT://:0,SSL://:0"})
    assert len(two.client_listeners()) == 2
    with pytest.raises(ConfigError, match="advertised.listeners listener names must be equal to or a subset of the "
                                          "ones defined in listeners. Found PLAINTEXT,SSL. The valid options based "
                                          "on the current configuration are PLAINTEXT"):
        BrokerConfig.from_properties({"listeners": "PLAINTEXT://:9092",
                                      "advertised.listeners": "PLAINTEXT://a:9092,SSL://a:9093"})
    with pytest.raises(ConfigError, match="Each listener must have a different name"):
        BrokerConfig.from_properties({"listeners": "PLAINTEXT://:9092",
                                      "advertised.listeners": "PLAINTEXT://a:9092,PLAINTEXT://b:9092"})
    with pytest.raises(ConfigError, match="expected NAME://host:port"):
        BrokerConfig.from_properties({"listeners": "PLAINTEXT:9092"})
    # the controller's listener may come anywhere; the broker needs one of its own
    either = BrokerConfig.from_properties({"listeners": "CONTROLLER://:9093,PLAINTEXT://:9092",
                                           "controller.listener.names": "CONTROLLER",
                                           "listener.security.protocol.map":
                                               "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"})
    assert either.client_listeners() == [("PLAINTEXT", "", 9092)]
    with pytest.raises(ConfigError, match="every listener is a controller listener"):
        BrokerConfig.from_properties({"listeners": "CONTROLLER://:9093", "controller.listener.names": "CONTROLLER",
                                      "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"})
    named = BrokerConfig.from_properties({"listeners": "CLIENT://127.0.0.1:9092",
                                          "listener.security.protocol.map": "CLIENT:PLAINTEXT"})
    assert named.listeners == ["CLIENT://127.0.0.1:9092"]


def test_the_inter_broker_listener_is_checked() -> None:
    """KafkaConfig's rules for inter.broker.listener.name and security.inter.broker.protocol."""
    voters = {"controller.quorum.voters": "1@127.0.0.1:9190,2@127.0.0.1:9191", "node.id": "1",
              "controller.listener.names": "CONTROLLER",
              "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT"}
    listeners = "INTERNAL://:9092,EXTERNAL://:9093,CONTROLLER://:9190"
    config = BrokerConfig.from_properties({**voters, "listeners": listeners, "inter.broker.listener.name": "internal"})
    assert config.inter_broker_listener == "INTERNAL"
    with pytest.raises(ConfigError, match="valid options based on currently configured listeners are "
                                          "INTERNAL,EXTERNAL"):  # the default, PLAINTEXT, is no listener here
        BrokerConfig.from_properties({**voters, "listeners": listeners})
    with pytest.raises(ConfigError, match="Only one of inter.broker.listener.name and security.inter.broker.protocol "
                                          "should be set."):
        BrokerConfig.from_properties({**voters, "listeners": listeners, "inter.broker.listener.name": "INTERNAL",
                                      "security.inter.broker.protocol": "PLAINTEXT"})
    with pytest.raises(ConfigError, match="Listener with name OTHER defined in inter.broker.listener.name not found "
                                          "in listener.security.protocol.map."):
        BrokerConfig.from_properties({**voters, "listeners": listeners, "inter.broker.listener.name": "OTHER"})
    # any security protocol between brokers (tests/integration/test_inter_broker_security.py)
    assert BrokerConfig.from_properties({**voters, "listeners": listeners, "inter.broker.listener.name":
                                         "EXTERNAL"}).inter_broker_listener == "EXTERNAL"
    assert BrokerConfig.from_properties({**voters, "listeners": "SSL://:9092,PLAINTEXT://:9093,CONTROLLER://:9190",
                                         "security.inter.broker.protocol": "SSL",
                                         "listener.security.protocol.map": "SSL:SSL,PLAINTEXT:PLAINTEXT,"
                                                                           "CONTROLLER:PLAINTEXT"}
                                        ).inter_broker_listener == "SSL"
    # an unadvertised listener is not one other brokers can reach
    with pytest.raises(ConfigError, match="must be a listener name defined in advertised.listeners"):
        BrokerConfig.from_properties({**voters, "listeners": listeners, "inter.broker.listener.name": "INTERNAL",
                                      "advertised.listeners": "EXTERNAL://a:9093"})


# -- broker synonyms supply topic defaults ----------------------------------------------------------

APPLIED_SYNONYMS = [name for name in TOPIC_OF_SYNONYM if BROKER_CONFIG_DEF[name].support is Support.APPLIED
                    and name not in PENDING_FROM_OTHER_BRANCHES]


@pytest.mark.parametrize("name", APPLIED_SYNONYMS)
def test_broker_synonym_sets_topic_default(name: str) -> None:
    key, topic_key = BROKER_CONFIG_DEF[name], TOPIC_OF_SYNONYM[name]
    raw = non_default(key)
    scale = next(s.scale for s in topic_key.synonyms if s.name == name)
    expected = key.parse(raw) * scale if scale != 1 else key.parse(raw)
    topic = TopicConfig.resolve(BrokerConfig.from_properties({name: raw}), {})
    assert topic.value_of(topic_key.name) == expected
    assert TopicConfig.resolve(BrokerConfig.from_properties({}), {}).value_of(topic_key.name) != expected


# -- Kafka's stock config/server.properties starts klamm ------------------------------------------

# The settings of Kafka 4.0's config/server.properties (a combined broker and controller), comments left out.
KAFKA_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_kafka_stock_server_properties_start_klamm(tmp_path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(KAFKA_SERVER_PROPERTIES)
    as_shipped = load_config(path, [])  # the file exactly as Kafka ships it passes every check
    assert as_shipped.listeners[0] == "PLAINTEXT://:9092" and as_shipped.num_recovery_threads_per_data_dir == 1
    # started on a free loopback port and a temporary directory, everything else as shipped
    config = load_config(path, [("log.dirs", str(tmp_path / "data")),
                                ("listeners", "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"),
                                ("advertised.listeners", "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0")])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    broker = Broker(config)
    try:
        asyncio.run_coroutine_threadsafe(broker.start(), loop).result(30)
        with RawClient(broker.port) as client:
            create_topic(client, "from-stock-config")
            assert produce(client, "from-stock-config", build_batch([(b"k", b"v")])).error_code == 0
            assert fetch(client, "from-stock-config", 0).high_watermark == 1
    finally:
        asyncio.run_coroutine_threadsafe(broker.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def test_describe_configs_documents_why_a_key_is_not_applied() -> None:
    entries = {e.name: e for e in BrokerConfig.from_properties({}).describe()}
    assert entries["num.io.threads"].documentation == (
        "Threads processing requests. klamm: not supported: requests are handled on the event loop; "
        "there is no I/O thread pool.")
    assert "klamm: accepted, no effect on a single node: follower replication" in \
        entries["replica.fetch.max.bytes"].documentation
    assert entries["num.partitions"].documentation == BROKER_CONFIG_DEF["num.partitions"].doc


def test_configs_are_listed_in_the_order_of_kafkas_scala_hash_map() -> None:
    """Buckets by the improved Java String hash of a table sized as Scala's HashMap grows; in a bucket, by hash.
    The bucket order of 34 topic config names was checked against a java.util.HashMap of the same names (the
    same improved hash and table size; it keeps a bucket in insertion order, Scala's in hash order)."""
    from klamm.broker.handlers.configs import _bucket_order, in_kafka_order

    h = 99162322  # Java: "hello".hashCode()
    assert _bucket_order("hello", 16) == ((h ^ (h >> 16)) & 15, h ^ (h >> 16))
    assert _bucket_order("é", 16) == (233 & 15, 233)  # one UTF-16 unit, U+00E9
    names = ["compression.type", "retention.ms", "cleanup.policy"] + [f"x{i}" for i in range(31)]
    ordered = [e["name"] for e in in_kafka_order([{"name": n} for n in names])]
    assert ordered.index("compression.type") < ordered.index("cleanup.policy") < ordered.index("retention.ms")
    keys = [_bucket_order(n, 64) for n in ordered]
    assert keys == sorted(keys)
