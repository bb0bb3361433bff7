"""The cost model: a roofline of real kernels per device profile, and its calibration from measurements."""
