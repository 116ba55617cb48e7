"""The transaction coordinator (KIP-98): per transactional id its producer id, epoch and
state, kept in the replicated `__transaction_state` topic and driven by InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn; commit and abort markers are written to
the transaction's partitions through WriteTxnMarkers."""
