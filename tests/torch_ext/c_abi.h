// The C ABI of libstalloc_torch.so (torch_ext/pluggable_allocator.cpp), as its callers see it:
// PyTorch's CUDAPluggableAllocator and the Python package.
#pragma once

#include <cstddef>

extern "C" {
int stalloc_configure(const char* conf, char* error, std::size_t error_size);
int stalloc_set_host_lag(unsigned queries, unsigned long long seed, char* error,
                         std::size_t error_size);
void* stalloc_malloc(std::size_t size, int device, void* stream);
void stalloc_free(void* ptr, std::size_t size, int device, void* stream);
void stalloc_record_stream(void* ptr, void* stream);
void stalloc_reset();
void stalloc_step();
void stalloc_wait_for_planning();
void stalloc_set_oom_thrower(void (*thrower)(const char*));
void stalloc_set_oom_wait(double seconds);
void stalloc_set_memory_fraction(double fraction, int device);
std::size_t stalloc_stats_json(char* buffer, std::size_t size);
void stalloc_reset_peak_stats(int device);
void stalloc_reset_accumulated_stats(int device);
void* stalloc_begin_allocate_to_pool_address();
}
