// The one header through which Swift reaches libatomic_ops.
//
// libatomic_ops spells its word type `AO_t` as a macro over `size_t` and its operations as
// macros and static inline functions with ordering suffixes (none = relaxed, `_acquire`,
// `_release`, `_full`). Swift cannot see macros, so this header declares one small static
// inline function per (width, operation, ordering) with fixed-width types, and one per
// (width, operation) that takes the ordering as an argument (`TK_ORDER_*`) and picks among
// them. Swift passes a constant ordering, so after inlining the choice folds away: everything
// here inlines into the Swift caller; nothing adds a call.
//
// Widths: 8 bits (`AO_char_*`, `unsigned char`), 16 bits (`AO_short_*`, `unsigned short`),
// 32 bits (`AO_int_*`, `unsigned int`) and 64 bits (`AO_*`, `AO_t`).
//
// Operations libatomic_ops 7.6 lacks with a returned old value (exchange, fetch-and/or/xor)
// are built from its fetch-compare-and-swap of the same ordering, the way x86 itself
// implements them (a `lock cmpxchg` loop).
//
// `_full` read-modify-writes. libatomic_ops' generic (GCC built-in) `_full` compare-and-swap
// is acquire-release, and its `_full` fetch-and-add is the built-in's `seq_cst`; on ARMv8.0
// both are an `ldaxr`/`stlxr` loop (inline or in libgcc's outline-atomics helpers). That is
// not a full barrier: a later plain load may be satisfied before the `stlxr` is visible
// (store buffering), and an earlier access and a later one may be observed in either order.
// So every `_full` read-modify-write here ends with `AO_nop_full` (`dmb ish`) on anything but
// x86. With it, the `stlxr`'s release keeps earlier accesses before the store, the fence
// keeps later accesses after it, and the load half cannot be observed apart from the store
// (exclusive pair): no access crosses the operation (the recipe of Linux's fully ordered
// arm64 atomics). On x86 a locked instruction is already a full barrier: no fence, no cost.
// A compare-and-swap that fails writes nothing, so nothing keeps an earlier access before
// its read: it is an acquiring load followed by the fence.
#ifndef TK_CATOMICOPS_H
#define TK_CATOMICOPS_H

#include <atomic_ops.h>
#include <stdint.h>
#include <stdbool.h>

_Static_assert(sizeof(AO_t) == sizeof(uint64_t), "the toolkit assumes a 64-bit AO_t");
_Static_assert(sizeof(unsigned int) == sizeof(uint32_t), "the toolkit assumes a 32-bit int");
_Static_assert(sizeof(unsigned short) == sizeof(uint16_t), "the toolkit assumes a 16-bit short");
_Static_assert(sizeof(unsigned char) == sizeof(uint8_t), "the toolkit assumes an 8-bit char");

// The orderings Swift passes (the raw values of `MemoryOrder.Load/.Store/.Update`). A value
// an operation does not know is treated as the strongest, so no input is undefined.
#define TK_ORDER_RELAXED 0
#define TK_ORDER_ACQUIRE 1
#define TK_ORDER_RELEASE 2
#define TK_ORDER_FULL 3

#define TK_AO_RELAXED
#define TK_AO_ACQUIRE _acquire
#define TK_AO_RELEASE _release
#define TK_AO_FULL _full

#if defined(__x86_64__) || defined(__i386__)
#define TK_AO_FULL_RMW_FENCE() ((void)0)
#else
#define TK_AO_FULL_RMW_FENCE() AO_nop_full()
#endif
// What follows a read-modify-write of each ordering (see `_full` above).
#define TK_AO_AFTER_relaxed() ((void)0)
#define TK_AO_AFTER_acquire() ((void)0)
#define TK_AO_AFTER_release() ((void)0)
#define TK_AO_AFTER_full() TK_AO_FULL_RMW_FENCE()

#define TK_CAT3_(a, b, c) a##b##c
#define TK_CAT3(a, b, c) TK_CAT3_(a, b, c)

// AO_char_* operates on `unsigned char`, AO_short_* on `unsigned short`, AO_int_* on
// `unsigned int`, AO_* on `AO_t` (size_t).
#define TK_AO_OP_u8(op, ord) TK_CAT3(AO_char_, op, ord)
#define TK_AO_OP_u16(op, ord) TK_CAT3(AO_short_, op, ord)
#define TK_AO_OP_u32(op, ord) TK_CAT3(AO_int_, op, ord)
#define TK_AO_OP_u64(op, ord) TK_CAT3(AO_, op, ord)
#define TK_AO_T_u8 unsigned char
#define TK_AO_T_u16 unsigned short
#define TK_AO_T_u32 unsigned int
#define TK_AO_T_u64 AO_t

// Read-modify-write operations of one width and one ordering. `tk_ao_*_fcas_*` is
// libatomic_ops' operation alone (no trailing fence), for the loops that build the others.
#define TK_DEFINE_RMW(W, T, ORDNAME, ORD)                                                     \
  static inline T tk_ao_##W##_fcas_##ORDNAME(volatile T *p, T expected, T desired) {          \
    return (T)TK_AO_OP_##W(fetch_compare_and_swap, ORD)(                                      \
        (volatile TK_AO_T_##W *)p, (TK_AO_T_##W)expected, (TK_AO_T_##W)desired);              \
  }                                                                                           \
  static inline T tk_atomic_##W##_fetch_add_##ORDNAME(volatile T *p, T v) {                   \
    T old = (T)TK_AO_OP_##W(fetch_and_add, ORD)((volatile TK_AO_T_##W *)p, (TK_AO_T_##W)v);    \
    TK_AO_AFTER_##ORDNAME();                                                                  \
    return old;                                                                               \
  }                                                                                           \
  static inline T tk_atomic_##W##_fetch_compare_and_swap_##ORDNAME(volatile T *p, T expected, \
                                                                    T desired) {              \
    T seen = tk_ao_##W##_fcas_##ORDNAME(p, expected, desired);                                \
    TK_AO_AFTER_##ORDNAME();                                                                  \
    return seen;                                                                              \
  }                                                                                           \
  static inline bool tk_atomic_##W##_compare_and_swap_##ORDNAME(volatile T *p, T expected,    \
                                                                 T desired) {                 \
    bool swapped = TK_AO_OP_##W(compare_and_swap, ORD)((volatile TK_AO_T_##W *)p,             \
                                                       (TK_AO_T_##W)expected,                 \
                                                       (TK_AO_T_##W)desired);                 \
    TK_AO_AFTER_##ORDNAME();                                                                  \
    return swapped;                                                                           \
  }                                                                                           \
  static inline T tk_atomic_##W##_exchange_##ORDNAME(volatile T *p, T v) {                    \
    T old = tk_atomic_##W##_load_relaxed(p);                                                  \
    for (;;) {                                                                                \
      T seen = tk_ao_##W##_fcas_##ORDNAME(p, old, v);                                         \
      if (seen == old) break;                                                                 \
      old = seen;                                                                             \
    }                                                                                         \
    TK_AO_AFTER_##ORDNAME();                                                                  \
    return old;                                                                               \
  }                                                                                           \
  TK_DEFINE_BITWISE(W, T, ORDNAME, and, &)                                                    \
  TK_DEFINE_BITWISE(W, T, ORDNAME, or, |)                                                     \
  TK_DEFINE_BITWISE(W, T, ORDNAME, xor, ^)

#define TK_DEFINE_BITWISE(W, T, ORDNAME, NAME, OPERATOR)                                      \
  static inline T tk_atomic_##W##_fetch_##NAME##_##ORDNAME(volatile T *p, T v) {              \
    T old = tk_atomic_##W##_load_relaxed(p);                                                  \
    for (;;) {                                                                                \
      T seen = tk_ao_##W##_fcas_##ORDNAME(p, old, old OPERATOR v);                            \
      if (seen == old) break;                                                                 \
      old = seen;                                                                             \
    }                                                                                         \
    TK_AO_AFTER_##ORDNAME();                                                                  \
    return old;                                                                               \
  }

#define TK_DEFINE_WIDTH(W, T)                                                                 \
  static inline T tk_atomic_##W##_load_relaxed(const volatile T *p) {                         \
    return (T)TK_AO_OP_##W(load, TK_AO_RELAXED)((const volatile TK_AO_T_##W *)p);             \
  }                                                                                           \
  static inline T tk_atomic_##W##_load_acquire(const volatile T *p) {                         \
    return (T)TK_AO_OP_##W(load, TK_AO_ACQUIRE)((const volatile TK_AO_T_##W *)p);             \
  }                                                                                           \
  static inline T tk_atomic_##W##_load_full(const volatile T *p) {                            \
    AO_nop_full();                                                                            \
    return (T)TK_AO_OP_##W(load, TK_AO_ACQUIRE)((const volatile TK_AO_T_##W *)p);             \
  }                                                                                           \
  static inline void tk_atomic_##W##_store_relaxed(volatile T *p, T v) {                      \
    TK_AO_OP_##W(store, TK_AO_RELAXED)((volatile TK_AO_T_##W *)p, (TK_AO_T_##W)v);            \
  }                                                                                           \
  static inline void tk_atomic_##W##_store_release(volatile T *p, T v) {                      \
    TK_AO_OP_##W(store, TK_AO_RELEASE)((volatile TK_AO_T_##W *)p, (TK_AO_T_##W)v);            \
  }                                                                                           \
  TK_DEFINE_RMW(W, T, relaxed, TK_AO_RELAXED)                                                 \
  TK_DEFINE_RMW(W, T, acquire, TK_AO_ACQUIRE)                                                 \
  TK_DEFINE_RMW(W, T, release, TK_AO_RELEASE)                                                 \
  TK_DEFINE_RMW(W, T, full, TK_AO_FULL)                                                       \
  static inline void tk_atomic_##W##_store_full(volatile T *p, T v) {                         \
    (void)tk_atomic_##W##_exchange_full(p, v);                                                \
  }                                                                                           \
  static inline T tk_atomic_##W##_load(const volatile T *p, int order) {                      \
    switch (order) {                                                                          \
    case TK_ORDER_RELAXED: return tk_atomic_##W##_load_relaxed(p);                            \
    case TK_ORDER_ACQUIRE: return tk_atomic_##W##_load_acquire(p);                            \
    default: return tk_atomic_##W##_load_full(p);                                             \
    }                                                                                         \
  }                                                                                           \
  static inline void tk_atomic_##W##_store(volatile T *p, T v, int order) {                   \
    switch (order) {                                                                          \
    case TK_ORDER_RELAXED: tk_atomic_##W##_store_relaxed(p, v); break;                        \
    case TK_ORDER_RELEASE: tk_atomic_##W##_store_release(p, v); break;                        \
    default: tk_atomic_##W##_store_full(p, v); break;                                         \
    }                                                                                         \
  }                                                                                           \
  TK_DEFINE_RMW_DISPATCH(W, T, T, fetch_compare_and_swap, (volatile T *p, T e, T d), (p, e, d)) \
  TK_DEFINE_RMW_DISPATCH(W, T, bool, compare_and_swap, (volatile T *p, T e, T d), (p, e, d))  \
  TK_DEFINE_RMW_DISPATCH(W, T, T, exchange, (volatile T *p, T v), (p, v))                     \
  TK_DEFINE_RMW_DISPATCH(W, T, T, fetch_add, (volatile T *p, T v), (p, v))                    \
  TK_DEFINE_RMW_DISPATCH(W, T, T, fetch_and, (volatile T *p, T v), (p, v))                    \
  TK_DEFINE_RMW_DISPATCH(W, T, T, fetch_or, (volatile T *p, T v), (p, v))                     \
  TK_DEFINE_RMW_DISPATCH(W, T, T, fetch_xor, (volatile T *p, T v), (p, v))

// `tk_atomic_W_OP(args..., int order)`: the read-modify-write OP of the given ordering.
#define TK_DEFINE_RMW_DISPATCH(W, T, R, OP, PARAMS, ARGS)                                     \
  static inline R tk_atomic_##W##_##OP TK_APPEND_ORDER PARAMS {                               \
    switch (order) {                                                                          \
    case TK_ORDER_RELAXED: return tk_atomic_##W##_##OP##_relaxed ARGS;                        \
    case TK_ORDER_ACQUIRE: return tk_atomic_##W##_##OP##_acquire ARGS;                        \
    case TK_ORDER_RELEASE: return tk_atomic_##W##_##OP##_release ARGS;                        \
    default: return tk_atomic_##W##_##OP##_full ARGS;                                         \
    }                                                                                         \
  }
#define TK_APPEND_ORDER(...) (__VA_ARGS__, int order)

TK_DEFINE_WIDTH(u8, uint8_t)
TK_DEFINE_WIDTH(u16, uint16_t)
TK_DEFINE_WIDTH(u32, uint32_t)
TK_DEFINE_WIDTH(u64, uint64_t)

/// Full barrier: no load or store moves across it (`AO_nop_full`: `mfence` on x86, `dmb ish`
/// on arm64).
static inline void tk_barrier_full(void) { AO_nop_full(); }
/// Acquire barrier: earlier loads stay before later loads and stores. The C11 acquire fence:
/// a compiler barrier on x86 (loads are not reordered with later accesses there), `dmb ishld`
/// on arm64, which orders earlier loads against later loads and stores, exactly this.
static inline void tk_barrier_acquire(void) { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
/// Release barrier: earlier loads and stores stay before later stores. The C11 release
/// fence: a compiler barrier on x86, `dmb ish` on arm64. Not `AO_nop_write`, which on arm64
/// is `dmb ishst` and orders earlier stores only: an earlier load could then read a value
/// written after another thread saw the later store.
static inline void tk_barrier_release(void) { __atomic_thread_fence(__ATOMIC_RELEASE); }

#endif
