"""What a CUDA memory snapshot says: devices, allocator history, allocation sites."""
