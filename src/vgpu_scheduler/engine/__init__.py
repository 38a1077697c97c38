"""Pure scheduling: requests, fit, policies, scores, ledger, quota, the filter decision. No I/O."""
