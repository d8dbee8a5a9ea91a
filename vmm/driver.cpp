#include "vmm/driver.h"

#include <cstring>

namespace stalloc::vmm {

std::string_view status_name(Status s) {
  switch (s) {
    case Status::Success: return "CUDA_SUCCESS";
    case Status::InvalidValue: return "CUDA_ERROR_INVALID_VALUE";
    case Status::OutOfMemory: return "CUDA_ERROR_OUT_OF_MEMORY";
    case Status::NotInitialized: return "CUDA_ERROR_NOT_INITIALIZED";
    case Status::Deinitialized: return "CUDA_ERROR_DEINITIALIZED";
    case Status::NoDevice: return "CUDA_ERROR_NO_DEVICE";
    case Status::InvalidDevice: return "CUDA_ERROR_INVALID_DEVICE";
    case Status::InvalidContext: return "CUDA_ERROR_INVALID_CONTEXT";
    case Status::InvalidHandle: return "CUDA_ERROR_INVALID_HANDLE";
    case Status::NotFound: return "CUDA_ERROR_NOT_FOUND";
    case Status::NotReady: return "CUDA_ERROR_NOT_READY";
    case Status::IllegalAddress: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case Status::ContextDestroyed: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case Status::CaptureUnsupported: return "CUDA_ERROR_STREAM_CAPTURE_* (not allowed during stream capture)";
    case Status::NotPermitted: return "CUDA_ERROR_NOT_PERMITTED";
    case Status::NotSupported: return "CUDA_ERROR_NOT_SUPPORTED";
    case Status::Unknown: return "CUDA_ERROR_UNKNOWN";
  }
  return "CUDA_ERROR_UNKNOWN";
}

Status Driver::write_bytes(DevicePtr dst, const void* src, std::size_t size) {
  if (!host_accessible()) return Status::NotSupported;
  std::memcpy(reinterpret_cast<void*>(dst), src, size);
  return Status::Success;
}

Status Driver::read_bytes(void* dst, DevicePtr src, std::size_t size) {
  if (!host_accessible()) return Status::NotSupported;
  std::memcpy(dst, reinterpret_cast<const void*>(src), size);
  return Status::Success;
}

Status Driver::gpu_use(StreamHandle, DevicePtr, std::size_t) { return Status::NotSupported; }

Status Driver::accessible_peers(std::vector<int>* out) {
  if (out == nullptr) return Status::InvalidValue;
  out->clear();
  return Status::Success;
}

Status Driver::set_peers(const std::vector<int>& devices) {
  return devices.empty() ? Status::Success : Status::InvalidDevice;
}

Status Driver::synchronize() { return Status::NotSupported; }

Status Driver::stream_is_capturing(StreamHandle, bool* capturing) {
  if (capturing == nullptr) return Status::InvalidValue;
  *capturing = false;
  return Status::Success;
}

Status Driver::stream_create(StreamHandle*) { return Status::NotSupported; }

Status Driver::stream_destroy(StreamHandle) { return Status::NotSupported; }

}  // namespace stalloc::vmm
