"""Rollout engines: token ids in, token ids and logprobs out; weight updates; routing over replicas."""
