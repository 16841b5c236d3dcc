"""L2-regularised DNNs: reformulations, attraction/repulsion, bottleneck structure.

(A) Jacot, Golikov, Hongler, Gabriel, "Feature Learning in L2-regularized DNNs:
Attraction/Repulsion and Sparsity" (NeurIPS 2022).
(B) Jacot, "Bottleneck Structure in Learned Features: Low-Dimension vs Regularity
Tradeoff" (NeurIPS 2023).
"""
