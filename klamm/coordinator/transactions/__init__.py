"""The transaction coordinator: transactional ids, their producer ids and transactions.

`metadata` holds a transactional id's state, `records` its __transaction_state
records, `coordinator` the state machine (Kafka's TransactionCoordinator) and
`runtime` what runs it inside the broker (the topic, loading, markers, timers).
"""
