// Every operator of microllm, in one include.
#pragma once

#include "microllm/ops/activation.h"
#include "microllm/ops/attention.h"
#include "microllm/ops/cast.h"
#include "microllm/ops/concat.h"
#include "microllm/ops/cross_entropy.h"
#include "microllm/ops/elementwise.h"
#include "microllm/ops/embedding.h"
#include "microllm/ops/index_select.h"
#include "microllm/ops/matmul.h"
#include "microllm/ops/reduce.h"
#include "microllm/ops/rms_norm.h"
#include "microllm/ops/rope.h"
#include "microllm/ops/softmax.h"
