"""The digital twin: the policy engine driven by a discrete-event engine on a virtual clock."""
