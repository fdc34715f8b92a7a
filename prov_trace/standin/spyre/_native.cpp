// prov-trace's CPU stand-in for the device side of torch-spyre's native extension.
//
// Written for prov-trace (not taken from torch-spyre). It gives PyTorch's
// PrivateUse1 dispatch key (renamed "spyre" by torch_spyre._autoload) what a
// backend must provide before a tensor can live there:
//
//   * an allocator whose memory is ordinary host memory, zero-filled;
//   * a device guard and PrivateUse1 hooks for a single device, index 0;
//   * a TensorImpl that carries a device-layout record (the four fields of a
//     SpyreTensorLayout, plus the allocation's sizes and strides) through
//     views and shallow copies, as torch-spyre's own TensorImpl does;
//   * the aten kernels torch-spyre implements natively (allocation, views,
//     set_, resize_), and nothing that torch-spyre registers from Python.
//
// The layout itself is computed in Python (prov_trace/standin/spyre/layout.py);
// this file only stores it. Helpers for the Python side are operators in the
// namespace `prov_trace_spyre`, loaded with torch.ops.load_library.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/impl/PyInterpreterHooks.h>
#include <torch/library.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <tuple>
#include <vector>

namespace prov_trace_standin {

constexpr c10::DeviceType kDev = c10::DeviceType::PrivateUse1;

// ---------------------------------------------------------------------------
// Memory: host memory, zero-filled so a buffer no kernel wrote reads as zeros.

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_allocations{0};

struct Block {
  void* ptr;
  size_t bytes;
};

void release_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  if (block == nullptr) return;
  g_live_bytes.fetch_sub(static_cast<int64_t>(block->bytes));
  c10::free_cpu(block->ptr);
  delete block;
}

struct HostBackedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    // Always allocate at least one byte so the data pointer is never null.
    size_t n = nbytes == 0 ? 1 : nbytes;
    void* ptr = c10::alloc_cpu(n);
    std::memset(ptr, 0, n);
    auto* block = new Block{ptr, n};
    g_live_bytes.fetch_add(static_cast<int64_t>(n));
    g_allocations.fetch_add(1);
    return {ptr, block, &release_block, c10::Device(kDev, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

HostBackedAllocator g_allocator;
REGISTER_ALLOCATOR(kDev, &g_allocator);

c10::Storage new_storage(size_t nbytes) {
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, &g_allocator,
                      /*resizable=*/true);
}

// ---------------------------------------------------------------------------
// Device guard: one device, index 0.

struct SingleDeviceGuard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device d) const override {
    check(d);
    return c10::Device(kDev, 0);
  }
  c10::Device getDevice() const override { return c10::Device(kDev, 0); }
  void setDevice(c10::Device d) const override { check(d); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDev, 0));
  }
  c10::Stream getDefaultStream(c10::Device) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDev, 0));
  }
  c10::Stream getNewStream(c10::Device, int priority = 0) const override {
    (void)priority;
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDev, 0));
  }
  c10::Stream exchangeStream(c10::Stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDev, 0));
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}

 private:
  static void check(c10::Device d) {
    TORCH_CHECK(!d.has_index() || d.index() == 0,
                "the Spyre CPU stand-in has one device, spyre:0; got ", d);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SingleDeviceGuard);

// ---------------------------------------------------------------------------
// Hooks: the device exists and is available. Random numbers come from a host
// generator (torch-spyre draws eager random tensors on the host anyway).

struct StandInHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    static at::Generator gen = at::make_generator<at::CPUGeneratorImpl>();
    return gen;
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return at::make_generator<at::CPUGeneratorImpl>();
  }
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kDev, 0); }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return c10::GetCPUAllocator();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t newsize) const override {
    c10::DataPtr fresh = g_allocator.allocate(newsize);
    size_t keep = std::min(storage.nbytes(), newsize);
    if (keep > 0) std::memcpy(fresh.get(), storage.data(), keep);
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
    storage.unsafeGetStorageImpl()->set_nbytes(newsize);
  }
};

struct HooksRegistration {
  HooksRegistration() { at::RegisterPrivateUse1HooksInterface(new StandInHooks()); }
};
HooksRegistration g_hooks_registration;

// ---------------------------------------------------------------------------
// A TensorImpl that carries the device-layout record.

struct LayoutRecord {
  std::vector<int64_t> device_size;
  std::vector<int64_t> stride_map;
  int64_t device_dtype = -1;  // -1: not set; Python derives the default from dma_*
  int64_t arrangement = 0;
  std::vector<int64_t> dma_sizes;   // sizes and strides of the allocation
  std::vector<int64_t> dma_strides;
};

struct StandInTensorImpl final : public c10::TensorImpl {
  LayoutRecord record;

  StandInTensorImpl(c10::Storage&& storage, c10::DispatchKeySet keys,
                    const caffe2::TypeMeta dtype)
      : c10::TensorImpl(std::move(storage), keys, dtype) {}
  StandInTensorImpl(c10::TensorImpl::ImplType view, c10::Storage&& storage,
                    c10::DispatchKeySet keys, const caffe2::TypeMeta dtype)
      : c10::TensorImpl(view, std::move(storage), keys, dtype) {}

  template <typename VersionCounter>
  c10::intrusive_ptr<c10::TensorImpl> detach_with(VersionCounter&& counter,
                                                  bool allow_change) const {
    if (key_set_.has(c10::DispatchKey::Python) &&
        !c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Python)) {
      auto r = (*c10::impl::getGlobalPyInterpreter())->detach(this);
      if (r) {
        r->set_version_counter(std::forward<VersionCounter>(counter));
        r->set_allow_tensor_metadata_change(allow_change);
        return r;
      }
    }
    auto impl = c10::make_intrusive<StandInTensorImpl>(
        c10::Storage(storage_), key_set_, data_type_);
    copy_tensor_metadata(this, impl.get(),
                         std::forward<VersionCounter>(counter), allow_change);
    impl->record = record;
    impl->refresh_numel();
    impl->refresh_contiguous();
    return impl;
  }

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& counter, bool allow_change) const override {
    return detach_with(counter, allow_change);
  }
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& counter, bool allow_change) const override {
    return detach_with(std::move(counter), allow_change);
  }
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& other) override {
    c10::TensorImpl::shallow_copy_from(other);
    if (auto* src = dynamic_cast<StandInTensorImpl*>(other.get())) {
      record = src->record;
    }
  }
};

StandInTensorImpl* impl_of(const at::Tensor& t) {
  TORCH_CHECK(t.defined() && t.device().type() == kDev,
              "expected a tensor on the spyre device, got one on ",
              t.defined() ? c10::str(t.device()) : std::string("(undefined)"));
  auto* impl = dynamic_cast<StandInTensorImpl*>(t.unsafeGetTensorImpl());
  TORCH_CHECK(impl != nullptr,
              "this spyre tensor was not made by the Spyre CPU stand-in "
              "(it has no device-layout record)");
  return impl;
}

at::Tensor fresh_tensor(size_t nbytes, c10::ScalarType dtype) {
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::make_tensor_base<StandInTensorImpl>(
      new_storage(nbytes), keys, c10::scalarTypeToTypeMeta(dtype));
}

// The dtypes the device accepts, set from Python (which holds the format table).
// Until it is set, every dtype is accepted.
std::atomic<uint64_t> g_allowed_dtypes{0};

void allow_dtype(c10::ScalarType dtype) {
  g_allowed_dtypes.fetch_or(uint64_t{1} << static_cast<int>(dtype));
}

void check_dtype(c10::ScalarType dtype) {
  uint64_t allowed = g_allowed_dtypes.load();
  TORCH_CHECK(allowed == 0 || (allowed >> static_cast<int>(dtype)) & 1,
              "Spyre backend does not support dtype ", dtype);
}

void check_alloc_args(c10::ScalarType dtype, std::optional<c10::Layout> layout,
                      std::optional<c10::Device> device,
                      std::optional<bool> pin_memory) {
  check_dtype(dtype);
  if (device.has_value()) {
    TORCH_CHECK(device->type() == kDev, "expected the spyre device, got ", *device);
    TORCH_CHECK(!device->has_index() || device->index() == 0,
                "the Spyre CPU stand-in has one device, spyre:0; got ", *device);
  }
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "the spyre device holds strided tensors only");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "pinned memory is a host feature");
}

// aten::empty.memory_format
at::Tensor empty_memory_format(c10::IntArrayRef size,
                               std::optional<c10::ScalarType> dtype_opt,
                               std::optional<c10::Layout> layout_opt,
                               std::optional<c10::Device> device_opt,
                               std::optional<bool> pin_memory_opt,
                               std::optional<c10::MemoryFormat> format_opt) {
  at::detail::check_size_nonnegative(size);
  auto dtype = c10::dtype_or_default(dtype_opt);
  check_alloc_args(dtype, layout_opt, device_opt, pin_memory_opt);
  auto format = format_opt.value_or(c10::MemoryFormat::Contiguous);
  TORCH_CHECK(format == c10::MemoryFormat::Contiguous ||
                  format == c10::MemoryFormat::Preserve,
              "the spyre device holds contiguous tensors only, got ", format);
  size_t nbytes =
      at::detail::computeStorageNbytesContiguous(size, c10::elementSize(dtype));
  auto t = fresh_tensor(nbytes, dtype);
  auto* impl = static_cast<StandInTensorImpl*>(t.unsafeGetTensorImpl());
  impl->set_sizes_contiguous(size);
  impl->record.dma_sizes = size.vec();
  impl->record.dma_strides = t.strides().vec();
  return t;
}

// aten::empty_strided
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype_opt,
                         std::optional<c10::Layout> layout_opt,
                         std::optional<c10::Device> device_opt,
                         std::optional<bool> pin_memory_opt) {
  at::detail::check_size_nonnegative(size);
  auto dtype = c10::dtype_or_default(dtype_opt);
  check_alloc_args(dtype, layout_opt, device_opt, pin_memory_opt);
  size_t nbytes =
      at::detail::computeStorageNbytes(size, stride, c10::elementSize(dtype));
  auto t = fresh_tensor(nbytes, dtype);
  auto* impl = static_cast<StandInTensorImpl*>(t.unsafeGetTensorImpl());
  impl->set_sizes_and_strides(size, stride);
  impl->record.dma_sizes = size.vec();
  impl->record.dma_strides = stride.vec();
  return t;
}

at::Tensor view_of(const at::Tensor& self, c10::IntArrayRef size,
                   c10::IntArrayRef stride, int64_t storage_offset) {
  auto* src = impl_of(self);
  auto out = at::detail::make_tensor<StandInTensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(self.storage()), self.key_set(),
      self.dtype());
  auto* impl = static_cast<StandInTensorImpl*>(out.unsafeGetTensorImpl());
  impl->set_sizes_and_strides(size, stride, storage_offset);
  impl->record = src->record;
  return out;
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  auto inferred = at::infer_size_dv(size, self.numel());
  auto stride = at::detail::computeStride(self.sizes(), self.strides(), inferred);
  TORCH_CHECK(stride.has_value(),
              "view size is not compatible with input tensor's size and stride "
              "(at least one dimension spans across two contiguous subspaces). "
              "Use .reshape(...) instead.");
  return view_of(self, inferred, *stride, self.storage_offset());
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size,
                         c10::IntArrayRef stride) {
  return view_of(self, size, stride, self.storage_offset());
}

at::Tensor alias(const at::Tensor& self) {
  return view_of(self, self.sizes(), self.strides(), self.storage_offset());
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size,
                      c10::IntArrayRef stride, std::optional<int64_t> offset) {
  return view_of(self, size, stride, offset.value_or(self.storage_offset()));
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size,
                  int64_t step) {
  int64_t dim = c10::maybe_wrap_dim(dimension, self.dim(), /*wrap_scalar=*/true);
  int64_t extent = self.dim() == 0 ? 1 : self.size(dim);
  TORCH_CHECK(size > 0, "unfold: size must be positive, got ", size);
  TORCH_CHECK(step > 0, "unfold: step must be positive, got ", step);
  TORCH_CHECK(size <= extent, "unfold: maximum size for tensor at dimension ",
              dim, " is ", extent, " but size is ", size);
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  std::vector<int64_t> strides(self.strides().begin(), self.strides().end());
  int64_t base_stride = self.dim() == 0 ? 1 : self.stride(dim);
  if (self.dim() > 0) {
    sizes[dim] = (extent - size) / step + 1;
    strides[dim] = base_stride * step;
  }
  sizes.push_back(size);
  strides.push_back(base_stride);
  return view_of(self, sizes, strides, self.storage_offset());
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  auto* impl = impl_of(self);
  TORCH_CHECK(source.device().type() == kDev,
              "set_: the storage is on ", source.device(), ", not on spyre");
  impl->set_storage_keep_dtype(std::move(source));
  at::native::setStrided(self, size, stride, offset);
  return self;
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<c10::MemoryFormat> format) {
  TORCH_CHECK(!format.has_value() || *format == c10::MemoryFormat::Contiguous,
              "resize_ on spyre supports the contiguous memory format only");
  auto* impl = impl_of(self);
  at::detail::check_size_nonnegative(size);
  if (self.sizes() == size && self.is_contiguous()) return self;
  size_t needed = at::detail::computeStorageNbytesContiguous(
      size, self.itemsize(), self.storage_offset());
  if (needed > self.storage().nbytes()) {
    c10::Storage fresh = new_storage(needed);
    size_t keep = std::min(self.storage().nbytes(), needed);
    if (keep > 0) std::memcpy(fresh.mutable_data(), self.storage().data(), keep);
    impl->set_storage_keep_dtype(std::move(fresh));
  }
  impl->set_sizes_contiguous(size);
  impl->record = LayoutRecord{};
  impl->record.dma_sizes = size.vec();
  impl->record.dma_strides = self.strides().vec();
  return self;
}

int64_t fused_sdp_choice(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const std::optional<at::Tensor>&, double, bool,
                         std::optional<double>, bool) {
  return static_cast<int64_t>(sdp::SDPBackend::overrideable);
}

}  // namespace prov_trace_standin

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub,
                              &prov_trace_standin::fused_sdp_choice);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace prov_trace_standin;
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_unsafe_view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("alias", TORCH_FN(alias));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("resize_", TORCH_FN(resize));
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// ---------------------------------------------------------------------------
// Helpers the Python half of the stand-in calls.

namespace prov_trace_standin {

// A host tensor over the same memory, with the same sizes, strides and offset.
// It keeps the device storage alive for as long as it lives.
at::Tensor host_view(const at::Tensor& self) {
  impl_of(self);
  c10::Storage storage = self.storage();
  void* base = storage.mutable_data();
  auto keep = [storage](void*) mutable { storage = c10::Storage(); };
  return at::for_blob(base, self.sizes())
      .strides(self.strides())
      .storage_offset(self.storage_offset())
      .deleter(keep)
      .options(at::TensorOptions().dtype(self.scalar_type()).device(c10::kCPU))
      .make_tensor();
}

std::tuple<std::vector<int64_t>, std::vector<int64_t>, int64_t, int64_t>
layout_of(const at::Tensor& self) {
  auto& r = impl_of(self)->record;
  return {r.device_size, r.stride_map, r.device_dtype, r.arrangement};
}

std::tuple<std::vector<int64_t>, std::vector<int64_t>> dma_of(const at::Tensor& self) {
  auto& r = impl_of(self)->record;
  return {r.dma_sizes, r.dma_strides};
}

void set_layout(const at::Tensor& self, c10::IntArrayRef device_size,
                c10::IntArrayRef stride_map, int64_t device_dtype,
                int64_t arrangement) {
  auto& r = impl_of(self)->record;
  r.device_size = device_size.vec();
  r.stride_map = stride_map.vec();
  r.device_dtype = device_dtype;
  r.arrangement = arrangement;
}

at::Tensor empty_with_layout(c10::IntArrayRef size, c10::IntArrayRef stride,
                             c10::ScalarType dtype, c10::IntArrayRef device_size,
                             c10::IntArrayRef stride_map, int64_t device_dtype,
                             int64_t arrangement, int64_t device_bytes) {
  at::detail::check_size_nonnegative(size);
  size_t host_bytes =
      at::detail::computeStorageNbytes(size, stride, c10::elementSize(dtype));
  size_t nbytes = std::max(host_bytes, static_cast<size_t>(std::max<int64_t>(device_bytes, 0)));
  auto t = fresh_tensor(nbytes, dtype);
  auto* impl = static_cast<StandInTensorImpl*>(t.unsafeGetTensorImpl());
  impl->set_sizes_and_strides(size, stride);
  impl->record.dma_sizes = size.vec();
  impl->record.dma_strides = stride.vec();
  set_layout(t, device_size, stride_map, device_dtype, arrangement);
  return t;
}

// A view with its own layout record (as_strided_with_layout, reinterpret_tensor).
// `relative` adds `offset` to the current storage offset instead of replacing it.
at::Tensor view_with_layout(const at::Tensor& self, c10::IntArrayRef size,
                            c10::IntArrayRef stride, int64_t offset, bool relative,
                            bool is_view, c10::IntArrayRef device_size,
                            c10::IntArrayRef stride_map, int64_t device_dtype,
                            int64_t arrangement) {
  auto* src = impl_of(self);
  int64_t storage_offset = relative ? self.storage_offset() + offset : offset;
  at::Tensor out =
      is_view ? at::detail::make_tensor<StandInTensorImpl>(
                    c10::TensorImpl::VIEW, c10::Storage(self.storage()),
                    self.key_set(), self.dtype())
              : at::detail::make_tensor<StandInTensorImpl>(
                    c10::Storage(self.storage()), self.key_set(), self.dtype());
  auto* impl = static_cast<StandInTensorImpl*>(out.unsafeGetTensorImpl());
  impl->set_sizes_and_strides(size, stride, storage_offset);
  LayoutRecord r;
  r.device_size = device_size.vec();
  r.stride_map = stride_map.vec();
  r.device_dtype = device_dtype;
  r.arrangement = arrangement;
  const auto& o = src->record;
  bool same = o.device_dtype == device_dtype && o.arrangement == arrangement &&
              o.device_size == r.device_size && o.stride_map == r.stride_map;
  if (same) {
    r.dma_sizes = o.dma_sizes;
    r.dma_strides = o.dma_strides;
  } else {
    r.dma_sizes = size.vec();
    r.dma_strides = stride.vec();
  }
  impl->record = r;
  return out;
}

// A plain host-side offset view for tensors that are not on spyre (the generated
// wrapper reinterprets host tensors too).
at::Tensor plain_reinterpret(const at::Tensor& self, c10::IntArrayRef size,
                             c10::IntArrayRef stride, int64_t offset_increment) {
  return self.as_strided(size, stride, self.storage_offset() + offset_increment);
}

std::tuple<int64_t, int64_t> memory_stats() {
  return {g_live_bytes.load(), g_allocations.load()};
}

}  // namespace prov_trace_standin

TORCH_LIBRARY(prov_trace_spyre, m) {
  using namespace prov_trace_standin;
  m.def("host_view(Tensor self) -> Tensor", TORCH_FN(host_view));
  m.def("layout_of(Tensor self) -> (int[], int[], int, int)", TORCH_FN(layout_of));
  m.def("dma_of(Tensor self) -> (int[], int[])", TORCH_FN(dma_of));
  m.def("set_layout(Tensor self, int[] device_size, int[] stride_map, int device_dtype, int arrangement) -> ()",
        TORCH_FN(set_layout));
  m.def("empty_with_layout(int[] size, int[] stride, ScalarType dtype, int[] device_size, int[] stride_map, "
        "int device_dtype, int arrangement, int device_bytes) -> Tensor",
        TORCH_FN(empty_with_layout));
  m.def("view_with_layout(Tensor self, int[] size, int[] stride, int offset, bool relative, bool is_view, "
        "int[] device_size, int[] stride_map, int device_dtype, int arrangement) -> Tensor",
        TORCH_FN(view_with_layout));
  m.def("plain_reinterpret(Tensor self, int[] size, int[] stride, int offset_increment) -> Tensor",
        TORCH_FN(plain_reinterpret));
  m.def("memory_stats() -> (int, int)", TORCH_FN(memory_stats));
  m.def("allow_dtype(ScalarType dtype) -> ()", TORCH_FN(allow_dtype));
}
