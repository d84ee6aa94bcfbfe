"""Grace: control plane and digital twin of a private GPU training cluster."""
