// generate_example: streams a generation from a strata server with the
// installed client library.
//
//   generate_example [HOST:PORT] [PROMPT] [MAX_TOKENS]
//
// Defaults: 127.0.0.1:50051, "Once upon a time", 32 tokens. Prints the text
// as it arrives, then the finish reason and decode tok/s on stderr. Exit
// status 1 with the server's status on one line when the call fails.
#include <cstdlib>
#include <iostream>
#include <string>

#include "strata/client.h"

int main(int argc, char** argv) {
  const std::string address = argc > 1 ? argv[1] : "127.0.0.1:50051";
  strata::GenerateOptions request;
  request.prompt = argc > 2 ? argv[2] : "Once upon a time";
  request.max_tokens = argc > 3 ? std::atoi(argv[3]) : 32;

  strata::ClientOptions options;
  options.deadline = std::chrono::seconds(60);
  auto client = strata::Client::connect(address, options);
  if (!client.ok()) {
    std::cerr << "generate_example: " << client.status() << "\n";
    return 1;
  }
  auto result = (*client)->generate_stream(
      request, [](const strata::Delta& delta) {
        std::cout << delta.text << std::flush;
        return true;  // false would cancel the generation
      });
  std::cout << "\n";
  if (!result.ok()) {
    std::cerr << "generate_example: " << address << ": " << result.status()
              << "\n";
    return 1;
  }
  std::cerr << "[" << result->finish_reason << "] "
            << result->usage.completion_tokens << " tokens, "
            << result->timings.decode_tok_s << " tok/s decode, seed "
            << result->seed << "\n";
  return 0;
}
