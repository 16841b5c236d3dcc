"""Density-matrix networks: closed-form layers by class-based PCA.

Dehmamy, Rohani, Katsaggelos, "Separation of time scales and direct computation
of weights in deep neural networks".
"""
