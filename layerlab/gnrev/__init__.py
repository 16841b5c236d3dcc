"""Exact Gauss–Newton in reversible networks.

Buffelli, McGowan, Xu, Cioba, Shiu, Hennequin, Bernacchia, "Exact, Tractable
Gauss-Newton Optimization in Deep Reversible Architectures Reveal Poor
Generalization" (NeurIPS 2024).
"""
