"""The metadata quorum: controllers agreeing on the metadata log through Raft, shaped as
KRaft is (api.py is the contract with the controller above it)."""
