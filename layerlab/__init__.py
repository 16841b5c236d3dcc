"""layerlab: what layers learn, in JAX."""
__version__ = "0.1.0"
