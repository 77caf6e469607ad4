// Cooperative CUDA threads for the CPU execution model (tests/ladder_emu/ladder_emu.h, both kernel
// families): every CUDA thread of a launch is a fiber with its own stack, all
// run by the calling OS thread. A fiber runs until it must wait (a barrier whose generation has
// not turned) and then yields to the next; the scheduler visits the live fibers round-robin in
// thread order, so a run is deterministic. With EMU_FIBER_ORDER=eager in the environment it
// instead always resumes the lowest-numbered fiber that can go on: warp 0 runs to the block's
// next barrier before warp 1 starts, so a copy one warp lands in shared memory before another
// warp has read what was there (a race the round-robin order hides, its warps moving in step
// from one warp-level operation to the next) shows in the output.
//
// Why not one OS thread per CUDA thread (what the models did before): every warp-level operation
// (shuffle, ldmatrix, mma) is a barrier over 32 threads, and with hundreds of OS threads on two
// cores each barrier cost a futex round trip and a context switch per thread; a fiber switch is a
// few instructions (x86-64: six saved registers and a stack pointer; elsewhere ucontext).
// What it adds: a deadlock (every live thread waiting at a barrier that can never turn: a missing
// arrival, a barrier inside a divergent branch) is reported and aborts, where OS threads hung.
//
// Everything here has internal linkage (`static`): tests/delta_emu/fake_device.py loads several
// models into one Python process, and each keeps its own scheduler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_FIBER_ASAN 1
#else
#define EMU_FIBER_ASAN 0
#endif

// ThreadSanitizer builds (g++ -fsanitize=thread; tests/test_emu_race.py): every fiber is a thread
// of its own to TSan, and a switch between fibers orders nothing (no_sync), so two accesses to
// the same memory by different CUDA threads are a reported race unless the model's
// synchronisation put one before the other: what the model releases and acquires is exactly what
// the hardware guarantees (a barrier's arrivals before its waiters' continuation, an mbarrier
// phase's arrivals and copies before its waiters; ladder_emu.h). The model's own bookkeeping
// (barrier counters, the scheduler's fields) is kept out of TSan's sight (EmuQuiet, EMU_NO_TSAN).
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define EMU_FIBER_TSAN 1
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
extern "C" void __tsan_read_range(void* addr, unsigned long size);
extern "C" void __tsan_write_range(void* addr, unsigned long size);
#define EMU_NO_TSAN __attribute__((no_sanitize_thread))
// While one lives, the running thread's memory accesses (calls into the C library included) are
// not seen; synchronisation still is.
struct EmuQuiet {
    EmuQuiet() { __tsan_ignore_thread_begin(); }
    ~EmuQuiet() { __tsan_ignore_thread_end(); }
    EmuQuiet(const EmuQuiet&) = delete;
    EmuQuiet& operator=(const EmuQuiet&) = delete;
};
static inline void emu_hb_release(const void* p) { __tsan_release(const_cast<void*>(p)); }
static inline void emu_hb_acquire(const void* p) { __tsan_acquire(const_cast<void*>(p)); }
#else
#define EMU_FIBER_TSAN 0
#define EMU_NO_TSAN
struct EmuQuiet {};
static inline void emu_hb_release(const void*) {}
static inline void emu_hb_acquire(const void*) {}
#endif
#define EMU_QUIET [[maybe_unused]] const EmuQuiet emu_quiet_{}
// Sync objects of a barrier's generations (or an mbarrier's phases), one per generation modulo
// EMU_HB_GENS: a generation's arrivals release its object, its waiters acquire it. (Objects are
// reused EMU_HB_GENS generations later, when every thread that took part has long moved on.)
constexpr unsigned EMU_HB_GENS = 64;
// Launch boundaries: the host's set-up before every thread of a launch, every thread before what
// the host does after it.
static char emu_hb_start, emu_hb_end;

#ifndef EMU_FIBER_STACK
#define EMU_FIBER_STACK (EMU_FIBER_ASAN ? (4u << 20) : (1u << 20))   // reserved, touched lazily
#endif

struct EmuFiber {
    void* sp = nullptr;            // saved stack pointer while switched out (x86-64)
#if !defined(__x86_64__)
    ucontext_t ctx;
#endif
    char* stack = nullptr;
    void* tsan = nullptr;          // ThreadSanitizer builds: the fiber's TSan thread, the asynchronous
    std::vector<std::pair<const void*, void*>> tsan_units;   // units working for it, one per completion
    char hb_issue = 0;             // channel (emu_hb_async), and the object each piece of work starts after
    bool done = false;
    unsigned index = 0;
    void* user = nullptr;          // the model's per-thread state (threadIdx, ...)
    // While the thread waits for a barrier generation to turn (emu_wait_while): the generation
    // counter and the value it must leave. The scheduler reads it and passes the thread over without
    // switching to it, which would only see the same value and yield again. A pure shortcut: who
    // runs, and in which order, is what switching to the thread would give.
    const void* wait_on = nullptr;
    unsigned long wait_token = 0;
    bool wait_wide = false;        // the counter is an unsigned long (else an unsigned)
    bool waiting() const {
        if (!wait_on) return false;
        return wait_wide ? *static_cast<const volatile unsigned long*>(wait_on) == wait_token
                         : *static_cast<const volatile unsigned*>(wait_on) == static_cast<unsigned>(wait_token);
    }
};

static std::vector<EmuFiber> emu_fibers;
static EmuFiber* emu_fiber_cur = nullptr;        // the running fiber; null on the scheduler
static void* emu_sched_tsan = nullptr;           // the scheduler's TSan thread (ThreadSanitizer builds)
static void* emu_sched_sp = nullptr;
#if !defined(__x86_64__)
static ucontext_t emu_sched_ctx;
#endif
static const std::function<void(unsigned)>* emu_fiber_body = nullptr;
static unsigned long emu_fiber_progress = 0;     // arrivals and thread exits, for deadlock detection
static unsigned long emu_fiber_switches = 0;     // switches from the scheduler into a thread
#if EMU_FIBER_ASAN
static const void* emu_sched_stack_bottom = nullptr;
static size_t emu_sched_stack_size = 0;
#endif

// The running CUDA thread's model state.
EMU_NO_TSAN static inline void* emu_fiber_user() { return emu_fiber_cur ? emu_fiber_cur->user : nullptr; }
EMU_NO_TSAN static inline void emu_fiber_note_progress() { ++emu_fiber_progress; }

// ThreadSanitizer builds: what an asynchronous unit does for the running thread (a copy engine
// writing a copy's bytes, the tensor core reading a wgmma's operands): the `nr` ranges `r`, read or
// written by a TSan thread of its own that starts after the issue (it acquires what the issuer
// released there) and ends before whoever acquires `done` (the mbarrier phase the copy completes
// on, or the wait that retires the cp.async or wgmma group). An access by another thread ordered
// neither before the issue nor after `done` is then a race, however early or late the unit did its
// part and whatever order the model ran things in. (The model does the work itself out of TSan's
// sight.) One unit per issuing thread and completion `channel` (an mbarrier, the thread's cp.async
// groups, its wgmma groups): a unit's clock grows with each piece of work, which is sound within a
// channel (its phases and groups complete in order) but would order one channel's waiters after
// another channel's unfinished work. (The waiters also inherit the issuer's history before the
// issue, which the hardware does not promise: a race that only that edge hides is not seen.) The
// ranges are read here uninstrumented: the unit touches nothing else.
struct EmuHbRange { const void* p; size_t n; };
EMU_NO_TSAN static inline void emu_hb_async(const void* channel, const EmuHbRange* r, int nr, bool write, void* done) {
#if EMU_FIBER_TSAN
    EmuFiber* f = emu_fiber_cur;
    if (f == nullptr) { std::fprintf(stderr, "emu_hb_async: asynchronous work issued outside a CUDA thread\n"); std::abort(); }
    void* unit = nullptr;
    for (const auto& [ch, u] : f->tsan_units)
        if (ch == channel) unit = u;
    if (unit == nullptr) {
        unit = __tsan_create_fiber(0);
        char name[64];
        std::snprintf(name, sizeof name, "asynchronous unit %zu of fiber %u", f->tsan_units.size(), f->index);
        __tsan_set_fiber_name(unit, name);
        f->tsan_units.emplace_back(channel, unit);
    }
    __tsan_release(&f->hb_issue);
    __tsan_switch_to_fiber(unit, __tsan_switch_to_fiber_no_sync);   // TSan's view only: same stack
    __tsan_acquire(&f->hb_issue);
    for (int i = 0; i < nr; ++i) {
        if (write) __tsan_write_range(const_cast<void*>(r[i].p), r[i].n);
        else __tsan_read_range(const_cast<void*>(r[i].p), r[i].n);
    }
    __tsan_release(done);
    __tsan_switch_to_fiber(f->tsan, __tsan_switch_to_fiber_no_sync);
#else
    (void)channel; (void)r; (void)nr; (void)write; (void)done;
#endif
}

#if defined(__x86_64__)
// Save the callee-saved registers on the current stack, store the stack pointer in *save, switch to
// `to` and pop that stack's registers (System V ABI: rbx, rbp, r12-r15 are callee-saved; the
// x87/SSE control words are left shared, as no kernel changes them).
__attribute__((naked, noinline)) static void emu_ctx_switch(void** /*save*/, void* /*to*/) {
    asm volatile(
        "pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
        "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
        "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret\n\t");
}
#endif

EMU_NO_TSAN static void emu_fiber_switch_to_sched(bool finishing) {
    EmuFiber* f = emu_fiber_cur;
#if EMU_FIBER_TSAN
    __tsan_switch_to_fiber(emu_sched_tsan, __tsan_switch_to_fiber_no_sync);
#endif
#if EMU_FIBER_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(finishing ? nullptr : &fake, emu_sched_stack_bottom, emu_sched_stack_size);
#else
    (void)finishing;
#endif
#if defined(__x86_64__)
    emu_ctx_switch(&f->sp, emu_sched_sp);
#else
    swapcontext(&f->ctx, &emu_sched_ctx);
#endif
#if EMU_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// From inside a CUDA thread: let the other threads run.
static inline void emu_yield() { emu_fiber_switch_to_sched(false); }

// From inside a CUDA thread: yield until *gen no longer equals token (a barrier's generation turning).
template <class G>
EMU_NO_TSAN static inline void emu_wait_while(const G* gen, G token) {
    static_assert(sizeof(G) == sizeof(unsigned long) || sizeof(G) == sizeof(unsigned), "a generation counter");
    EmuFiber* f = emu_fiber_cur;
    if (f == nullptr) { std::fprintf(stderr, "emu_wait_while: a wait outside a CUDA thread\n"); std::abort(); }
    while (*static_cast<const volatile G*>(gen) == token) {
        f->wait_on = gen;
        f->wait_token = static_cast<unsigned long>(token);
        f->wait_wide = sizeof(G) == sizeof(unsigned long);
        emu_yield();
        f->wait_on = nullptr;
    }
}

EMU_NO_TSAN static void emu_fiber_entry() {
#if EMU_FIBER_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &emu_sched_stack_bottom, &emu_sched_stack_size);
#endif
    EmuFiber* f = emu_fiber_cur;
    emu_hb_acquire(&emu_hb_start);
    (*emu_fiber_body)(f->index);
    emu_hb_release(&emu_hb_end);
    f->done = true;
    emu_fiber_note_progress();
    emu_fiber_switch_to_sched(true);
    std::abort();   // a finished fiber is never resumed
}

EMU_NO_TSAN static void emu_fiber_prepare(EmuFiber& f) {
    char* top = f.stack + EMU_FIBER_STACK;
#if EMU_FIBER_ASAN
    // a reused stack still carries the redzones of the frames its last thread never returned from
    __asan_unpoison_memory_region(f.stack, EMU_FIBER_STACK);
#endif
#if defined(__x86_64__)
    void** sp = reinterpret_cast<void**>(reinterpret_cast<std::uintptr_t>(top) & ~std::uintptr_t(15));
    *--sp = nullptr;                                     // the entry function's (never used) return address
    *--sp = reinterpret_cast<void*>(&emu_fiber_entry);   // popped by the switch's `ret`
    for (int i = 0; i < 6; ++i) *--sp = nullptr;         // rbp rbx r12 r13 r14 r15
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = EMU_FIBER_STACK;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, emu_fiber_entry, 0);
#endif
}

// Run n CUDA threads to completion: thread i runs body(i) with users[i] as its model state.
// Aborts with a message if every live thread waits and none can go on (a deadlock).
static void emu_fibers_run(unsigned n, const std::function<void(unsigned)>& body, void* const* users) {
    if (emu_fiber_cur) { std::fprintf(stderr, "emu_fibers_run: nested launch\n"); std::abort(); }
    if (emu_fibers.size() < n) {
        const size_t old = emu_fibers.size();
        emu_fibers.resize(n);
        for (size_t i = old; i < n; ++i) {
            void* p = mmap(nullptr, EMU_FIBER_STACK, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
            if (p == MAP_FAILED) { std::fprintf(stderr, "emu_fibers_run: no memory for %u stacks\n", n); std::abort(); }
            emu_fibers[i].stack = static_cast<char*>(p);
#if EMU_FIBER_TSAN
            emu_fibers[i].tsan = __tsan_create_fiber(0);
            char name[32];
            std::snprintf(name, sizeof name, "fiber %zu", i);   // a plain launch's threadIdx.x
            __tsan_set_fiber_name(emu_fibers[i].tsan, name);
#endif
        }
    }
    emu_fiber_body = &body;
    for (unsigned i = 0; i < n; ++i) {
        EmuFiber& f = emu_fibers[i];
        f.done = false;
        f.index = i;
        f.user = users[i];
        f.wait_on = nullptr;
        emu_fiber_prepare(f);
    }
#if EMU_FIBER_TSAN
    emu_sched_tsan = __tsan_get_current_fiber();
#endif
    emu_hb_release(&emu_hb_start);   // the host's set-up (inputs, poisoned shared memory, thread states)
    EMU_QUIET;                       // the scheduler reads what the threads write (done, generations)
    static const bool eager = [] {
        const char* e = std::getenv("EMU_FIBER_ORDER");
        return e != nullptr && e[0] == 'e';
    }();
    unsigned live = n;
    while (live > 0) {
        const unsigned long before = emu_fiber_progress;
        for (unsigned i = 0; i < n; ++i) {
            EmuFiber& f = emu_fibers[i];
            if (f.done) continue;
            if (eager && emu_fiber_progress != before) break;   // someone lower may go on now: from fiber 0 again
            if (f.waiting()) continue;                          // its barrier has not turned: it would only yield
            emu_fiber_cur = &f;
            ++emu_fiber_switches;
#if EMU_FIBER_ASAN
            void* fake = nullptr;
            __sanitizer_start_switch_fiber(&fake, f.stack, EMU_FIBER_STACK);
#endif
            void* const to = f.sp;   // read as the scheduler (TSan builds: after the next call, TSan runs thread f)
            (void)to;
#if EMU_FIBER_TSAN
            __tsan_switch_to_fiber(f.tsan, __tsan_switch_to_fiber_no_sync);
#endif
#if defined(__x86_64__)
            emu_ctx_switch(&emu_sched_sp, to);
#else
            swapcontext(&emu_sched_ctx, &f.ctx);
#endif
#if EMU_FIBER_ASAN
            __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
            emu_fiber_cur = nullptr;
            if (f.done) --live;
        }
        // a whole pass (an eager pass only ends early after progress) in which nobody moved
        if (live > 0 && emu_fiber_progress == before) {
            std::fprintf(stderr, "deadlock: %u of %u threads wait at barriers that can no longer turn "
                                 "(a missing arrival, or a barrier in a branch some threads skip)\n", live, n);
            std::abort();
        }
    }
    emu_fiber_body = nullptr;
    emu_hb_acquire(&emu_hb_end);   // everything the threads did, before the host reads results
}

// A barrier over `n` arrivals, fiber-aware: arrive() returns the generation it belongs to; wait()
// yields until that generation has turned. arrive_and_wait() is bar.sync / __syncthreads.
struct EmuBarrier {
    unsigned n = 0, count = 0;
    unsigned long gen = 0;
    char hb[EMU_HB_GENS] = {};   // TSan sync objects of the generations
    EmuBarrier() = default;
    explicit EmuBarrier(unsigned n_) : n(n_) {}
    // hb = false: a rendezvous that orders no memory (the model's exchange inside a warp collective:
    // shfl, mma, ldmatrix order nothing in the PTX memory model; __syncwarp and bar.sync do)
    EMU_NO_TSAN unsigned long arrive(bool hb = true) {
        emu_fiber_note_progress();
        const unsigned long g = gen;
        if (hb) emu_hb_release(&this->hb[g % EMU_HB_GENS]);
        if (++count == n) { count = 0; ++gen; }
        return g;
    }
    EMU_NO_TSAN void wait(unsigned long token, bool hb = true) const {
        emu_wait_while(&gen, token);
        if (hb) emu_hb_acquire(&this->hb[token % EMU_HB_GENS]);
    }
    void arrive_and_wait(bool hb = true) { wait(arrive(hb), hb); }
};
