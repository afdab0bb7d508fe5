// api/stop_matcher.h — Stop strings over streamed text. Text is released only when it can no
// longer become part of a stop string: the longest suffix that is a prefix of some stop string
// is held back. The stop string itself is never emitted (OpenAI semantics).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::api {

class stop_matcher {
public:
    explicit stop_matcher(std::vector<std::string> stops);

    struct step {
        std::string emit;      // text that is safe to send now
        bool stopped = false;  // a stop string was found; nothing after it may be sent
    };
    step push(std::string_view text);
    // The end of generation: whatever was held back is released.
    std::string flush();
    bool stopped() const { return stopped_; }
    // The stop string that ended the text (Anthropic's stop_sequence); empty before that.
    const std::string& matched() const { return matched_; }

private:
    std::vector<std::string> stops_;
    std::string matched_;
    std::string pending_;
    bool stopped_ = false;
};

}  // namespace tandem::api
