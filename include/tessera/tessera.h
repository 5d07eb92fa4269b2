// tessera: attention kernels for large language models. Include this one header.
#pragma once

#include "tessera/attention.h"
#include "tessera/batch.h"
#include "tessera/error.h"
#include "tessera/options.h"
#include "tessera/paged_kv.h"
#include "tessera/tensor.h"

namespace tessera {
const char* version() noexcept;
bool cuda_available() noexcept;  // built with CUDA and at least one device present
}  // namespace tessera
