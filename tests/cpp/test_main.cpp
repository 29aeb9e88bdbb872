// test_main.cpp: the C++ core's test program (setup.py build_cpp_tests; tests/test_cpp_core.py
// runs it). The core runs here without Python: this program is its embedder
// (device/embedder.h), with the core's plain defaults unless a case installs its own (the call
// plan's count the steps it runs unlocked), and a case that needs something from outside is
// given it on the command line.
//
//   core_tests --list                      the cases' names, one a line
//   core_tests [--pipelines LIB] [CASE...] the cases named (all without a name); exit status 1
//                                          when one failed, 2 for a bad command line
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <typeinfo>
#include <vector>

#include "harness.h"

namespace hb_test {

std::vector<Case> &cases() {
    static std::vector<Case> all;
    return all;
}

Options &options() {
    static Options given;
    return given;
}

void fail(const char *file, int line, const std::string &what) {
    const char *name = std::strrchr(file, '/');
    throw Failure{std::string(name ? name + 1 : file) + ":" + std::to_string(line) + ": " + what};
}

void check_message(const char *what, const std::string &fragment, const char *file, int line) {
    if (!std::strstr(what, fragment.c_str()))
        fail(file, line, std::string("the exception says \"") + what + "\", without \"" + fragment + "\"");
}

namespace {

/// Runs one case; prints "ok NAME" or "FAIL NAME" with why. Anything it throws ends it.
bool run(const Case &c) {
    std::string why;
    try {
        c.run();
        std::printf("ok %s\n", c.name);
        return true;
    } catch (const Failure &f) {
        why = f.what;
    } catch (const std::exception &e) {
        why = std::string("unexpected exception ") + typeid(e).name() + ": " + e.what();
    } catch (...) {
        why = "unexpected exception of an unknown type";
    }
    std::printf("FAIL %s\n  %s\n", c.name, why.c_str());
    return false;
}

const Case *find(const std::string &name) {
    for (const Case &c : cases()) {
        if (name == c.name) return &c;
    }
    return nullptr;
}

int usage(const std::string &problem) {
    std::fprintf(stderr, "core_tests: %s\nusage: core_tests --list | [--pipelines LIBRARY] [CASE...]\n",
                 problem.c_str());
    return 2;
}

}  // namespace
}  // namespace hb_test

int main(int argc, char **argv) {
    using namespace hb_test;
    std::vector<const Case *> chosen;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--list") {
            for (const Case &c : cases()) std::printf("%s\n", c.name);
            return 0;
        }
        if (arg == "--pipelines") {
            if (++i == argc) return usage("--pipelines needs the path of a library");
            options().pipelines = argv[i];
        } else if (const Case *c = find(arg)) {
            chosen.push_back(c);
        } else {
            return usage("no case is named '" + arg + "' (--list names them)");
        }
    }
    if (chosen.empty()) {
        for (const Case &c : cases()) chosen.push_back(&c);
    }
    int failed = 0;
    for (const Case *c : chosen) failed += !run(*c);
    if (chosen.size() > 1) std::printf("%zu passed, %d failed\n", chosen.size() - size_t(failed), failed);
    std::fflush(stdout);
    return failed ? 1 : 0;
}
