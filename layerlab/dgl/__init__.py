"""Deep Gaussian Layer-wise losses (DGL), LEGO training and monitoring.

Ben-David & Ringel, "The role of a layer in deep neural networks: a Gaussian
Process perspective" (2019).
"""
