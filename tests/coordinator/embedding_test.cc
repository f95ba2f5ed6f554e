// Embedding requests before they run (coordinator/embedding.h): the bounds
// of inference.proto's EmbedRequest, each refused naming the input, and
// the pooling a request resolves to from the GGUF's {arch}.pooling_type
// (llama.cpp's enum: 1 mean, 2 cls, 3 last, 4 rank), read from GGUFs
// written here.
#include "coordinator/embedding.h"

#include <fstream>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/model/gguf_builder.h"
#include "tests/model/gguf_test_util.h"

namespace strata::coordinator {
namespace {

ServedModel model_of(int n_vocab, int n_ctx) {
  ServedModel m;
  m.info.set_name("m");
  m.info.set_n_vocab(n_vocab);
  m.n_ctx = n_ctx;
  m.hp.architecture = "llama";
  return m;
}

v1::EmbedRequest ids_request(int inputs, int ids_each, int32_t id = 7) {
  v1::EmbedRequest r;
  for (int i = 0; i < inputs; ++i) {
    v1::TokenIds* ids = r.add_inputs()->mutable_ids();
    for (int k = 0; k < ids_each; ++k) ids->add_ids(id);
  }
  return r;
}

TEST(EmbedInputs, IdsAreUsedAsGivenOnePromptPerInput) {
  const ServedModel m = model_of(100, 300);
  v1::EmbedRequest r = ids_request(3, 2);
  r.mutable_inputs(1)->mutable_ids()->set_ids(1, 99);
  auto prompts = prepare_embed_inputs(m, r);
  ASSERT_TRUE(prompts.ok()) << prompts.status();
  ASSERT_EQ(prompts->size(), 3u);
  EXPECT_EQ((*prompts)[1], std::vector<int32_t>({7, 99}));
}

TEST(EmbedInputs, BoundsAreRefusedNamingTheInput) {
  const ServedModel m = model_of(100, 300);
  auto refused = [&](const v1::EmbedRequest& r, absl::StatusCode code, const std::string& message) {
    const absl::StatusOr<std::vector<std::vector<int32_t>>> p = prepare_embed_inputs(m, r);
    EXPECT_EQ(p.status().code(), code) << message;
    EXPECT_EQ(p.status().message(), message);
  };
  refused(v1::EmbedRequest(), absl::StatusCode::kInvalidArgument, "inputs: empty (give 1 to 2048)");
  refused(ids_request(2049, 1), absl::StatusCode::kInvalidArgument,
          "inputs: 2049 inputs; at most 2048");
  v1::EmbedRequest r = ids_request(2, 3);
  r.mutable_inputs(1)->mutable_ids()->set_ids(2, 100);
  refused(r, absl::StatusCode::kInvalidArgument, "inputs[1].ids[2]: 100 is out of range [0, 100)");
  r.mutable_inputs(1)->mutable_ids()->set_ids(2, -1);
  refused(r, absl::StatusCode::kInvalidArgument, "inputs[1].ids[2]: -1 is out of range [0, 100)");
  refused(ids_request(1, 301), absl::StatusCode::kOutOfRange,
          "inputs[0]: 301 tokens exceed the context of 300");
  refused(ids_request(2, 0), absl::StatusCode::kInvalidArgument, "inputs[0]: empty");
  v1::EmbedRequest neither;
  neither.add_inputs();
  refused(neither, absl::StatusCode::kInvalidArgument, "inputs[0]: neither text nor ids");
  v1::EmbedRequest text;
  text.add_inputs()->set_text("hello");
  refused(text, absl::StatusCode::kFailedPrecondition,
          "inputs[0].text: the served model has no tokenizer; give ids");
  text.mutable_inputs(0)->set_text("");
  refused(text, absl::StatusCode::kInvalidArgument, "inputs[0].text: empty");
  v1::EmbedRequest salted = ids_request(1, 1);
  salted.set_cache_salt(std::string(257, 's'));
  refused(salted, absl::StatusCode::kInvalidArgument, "cache_salt: 257 bytes exceed 256");
  v1::EmbedRequest other = ids_request(1, 1);
  other.set_model("x");
  EXPECT_EQ(prepare_embed_inputs(m, other).status().code(), absl::StatusCode::kNotFound);
}

// OpenAI's 300,000 tokens a request: exactly that passes; one more input's
// tokens are refused, naming the input that passed the bound.
TEST(EmbedInputs, AllInputsTogetherTakeAtMost300000Tokens) {
  const ServedModel m = model_of(100, 300);
  EXPECT_TRUE(prepare_embed_inputs(m, ids_request(1000, 300)).ok());
  const auto over = prepare_embed_inputs(m, ids_request(1001, 300));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(),
            "inputs: more than 300000 tokens in all (300300 by inputs[1000]); send fewer or "
            "shorter inputs");
}

// A GGUF of one key, `llama.pooling_type` = type (none when type < 0).
std::shared_ptr<const gguf::GgufModel> gguf_with_pooling(const gguf::testing::TempDir& dir,
                                                         int type) {
  gguf::testing::GgufBuilder b;
  b.header(0, type < 0 ? 0 : 1);
  if (type >= 0) b.kv_u32("llama.pooling_type", static_cast<uint32_t>(type));
  const std::string path = (dir.path() / ("pooling" + std::to_string(type) + ".gguf")).string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.bytes().data()),
             static_cast<std::streamsize>(b.bytes().size()));
  auto opened = gguf::GgufModel::open(path);
  EXPECT_TRUE(opened.ok()) << opened.status();
  return opened.ok() ? std::shared_ptr<const gguf::GgufModel>(*std::move(opened)) : nullptr;
}

TEST(EmbedPooling, TheDefaultIsTheGgufsMeanOrLastElseLast) {
  gguf::testing::TempDir dir;
  ServedModel m = model_of(100, 300);
  struct Case {
    int type;
    Pooling want;
  };
  for (const Case c : {Case{-1, Pooling::kLast}, Case{0, Pooling::kLast}, Case{1, Pooling::kMean},
                       Case{3, Pooling::kLast}}) {
    m.gguf = gguf_with_pooling(dir, c.type);
    ASSERT_NE(m.gguf, nullptr);
    const absl::StatusOr<Pooling> p = resolve_pooling(m, v1::POOLING_DEFAULT);
    ASSERT_TRUE(p.ok()) << c.type << ": " << p.status();
    EXPECT_EQ(*p, c.want) << c.type;
    // Asked for, the pooling is what was asked, whatever the GGUF says.
    EXPECT_EQ(*resolve_pooling(m, v1::POOLING_MEAN), Pooling::kMean);
    EXPECT_EQ(*resolve_pooling(m, v1::POOLING_LAST), Pooling::kLast);
  }
  m.gguf = gguf_with_pooling(dir, 2);
  const absl::StatusOr<Pooling> cls = resolve_pooling(m, v1::POOLING_DEFAULT);
  EXPECT_EQ(cls.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cls.status().message(),
            "pooling: the model's llama.pooling_type is 2 (cls), which is not served; ask for mean "
            "or last");
  EXPECT_EQ(*resolve_pooling(m, v1::POOLING_LAST), Pooling::kLast);
  EXPECT_EQ(resolve_pooling(m, static_cast<v1::Pooling>(9)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EmbedNormalize, UnitNormAndZeroStaysZero) {
  std::vector<float> v = {3.0f, 4.0f};
  l2_normalize(v);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], 0.8f);
  std::vector<float> zero = {0.0f, 0.0f};
  l2_normalize(zero);
  EXPECT_EQ(zero, std::vector<float>({0.0f, 0.0f}));
}

}  // namespace
}  // namespace strata::coordinator
