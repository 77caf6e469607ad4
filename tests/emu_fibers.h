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

#ifndef EMU_FIBER_STACK
#define EMU_FIBER_STACK (EMU_FIBER_ASAN ? (4u << 20) : (1u << 20))   // reserved, touched lazily
#endif

struct EmuFiber {
    void* sp = nullptr;            // saved stack pointer while switched out (x86-64)
#if !defined(__x86_64__)
    ucontext_t ctx;
#endif
    char* stack = nullptr;
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
static inline void* emu_fiber_user() { return emu_fiber_cur ? emu_fiber_cur->user : nullptr; }
static inline void emu_fiber_note_progress() { ++emu_fiber_progress; }

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

static void emu_fiber_switch_to_sched(bool finishing) {
    EmuFiber* f = emu_fiber_cur;
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
static inline void emu_wait_while(const G* gen, G token) {
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

static void emu_fiber_entry() {
#if EMU_FIBER_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &emu_sched_stack_bottom, &emu_sched_stack_size);
#endif
    EmuFiber* f = emu_fiber_cur;
    (*emu_fiber_body)(f->index);
    f->done = true;
    emu_fiber_note_progress();
    emu_fiber_switch_to_sched(true);
    std::abort();   // a finished fiber is never resumed
}

static void emu_fiber_prepare(EmuFiber& f) {
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
#if defined(__x86_64__)
            emu_ctx_switch(&emu_sched_sp, f.sp);
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
}

// A barrier over `n` arrivals, fiber-aware: arrive() returns the generation it belongs to; wait()
// yields until that generation has turned. arrive_and_wait() is bar.sync / __syncthreads.
struct EmuBarrier {
    unsigned n = 0, count = 0;
    unsigned long gen = 0;
    EmuBarrier() = default;
    explicit EmuBarrier(unsigned n_) : n(n_) {}
    unsigned long arrive() {
        emu_fiber_note_progress();
        const unsigned long g = gen;
        if (++count == n) { count = 0; ++gen; }
        return g;
    }
    void wait(unsigned long token) const { emu_wait_while(&gen, token); }
    void arrive_and_wait() { wait(arrive()); }
};
