// tools/bench/ab_decode/driver.cpp — runs two builds' decode steps in one process, alternating in
// chunks (see ../ab_decode.sh). Why: on a shared VM the memory bandwidth moves by 10-40% within
// seconds, so two runs one after the other differ by more than most changes; chunks of a few steps,
// A then B, then B then A, see the same moments. The ratio of the totals is the figure; A against
// itself prints ~1.00 (0.998 in a 30-chunk run on the Xeon 6 VM).
#include <dlfcn.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
using init_fn = void* (*)(const char*, const char*, int, int, int, int);
using steps_fn = double (*)(void*, int);
int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: driver A.so B.so MODEL_DIR [batch] [chunks] [steps per chunk] [context] [prefill 1|0]  (MM=exact|amx)\n");
        return 2;
    }
    const int B = argc > 4 ? atoi(argv[4]) : 16, chunks = argc > 5 ? atoi(argv[5]) : 20, per = argc > 6 ? atoi(argv[6]) : 5;
    const int context = argc > 7 ? atoi(argv[7]) : 64, prefill = argc > 8 ? atoi(argv[8]) : 1;
    // MM: both sides' backend.cpu_matmul (default amx); MM_B overrides side B's (exact against amx).
    const char* mm = getenv("MM") ? getenv("MM") : "amx";
    const char* mm_b = getenv("MM_B") ? getenv("MM_B") : mm;
    void* h[2]; init_fn in[2]; steps_fn st[2]; void* s[2];
    for (int i = 0; i < 2; ++i) {
        h[i] = dlopen(argv[1 + i], RTLD_NOW | RTLD_LOCAL);
        if (!h[i]) { fprintf(stderr, "%s\n", dlerror()); return 1; }
        in[i] = (init_fn)dlsym(h[i], "ab_init"); st[i] = (steps_fn)dlsym(h[i], "ab_steps");
        s[i] = in[i](argv[3], i == 0 ? mm : mm_b, B, chunks * per + 8, context, prefill);
        if (!s[i]) return 1;
    }
    st[0](s[0], 4); st[1](s[1], 4);  // warm
    std::vector<double> ratio; double ta = 0, tb = 0;
    for (int c = 0; c < chunks; ++c) {
        const int first = c % 2;  // alternate who goes first
        double t[2];
        t[first] = st[first](s[first], per);
        t[1 - first] = st[1 - first](s[1 - first], per);
        ta += t[0]; tb += t[1];
        ratio.push_back(t[0] / t[1]);
    }
    std::sort(ratio.begin(), ratio.end());
    printf("batch %d, context %d: first loaded %.3f ms/step, second %.3f ms/step, first / second total %.3f, per-chunk median %.3f "
           "(p25 %.3f p75 %.3f)\n",
           B, context, ta * 1e3 / (chunks * per), tb * 1e3 / (chunks * per), ta / tb, ratio[ratio.size() / 2],
           ratio[ratio.size() / 4], ratio[3 * ratio.size() / 4]);
}
