"""The device layer: accelerators as data, the per-op roofline, step time and utilisation, prefill and
decode, plots. (Not called ``hardware``: that name is the public verb :func:`costmodel.hardware`.)"""
