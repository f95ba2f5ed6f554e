// Template: parse once, render many times (see jinja.h).
#include "model/jinja/jinja.h"

#include <exception>
#include <new>
#include <string>

#include "model/jinja/ast.h"

namespace strata::jinja {

absl::StatusOr<Template> Template::parse(std::string_view source, const Options& options) {
  try {
    Template t;
    t.root_ = parse_template(source, options);
    return t;
  } catch (const Error& e) {
    return absl::Status(e.code, e.message);
  } catch (const std::exception& e) {  // e.g. a number out of range
    return absl::InvalidArgumentError(std::string("template: ") + e.what());
  }
}

absl::StatusOr<std::string> Template::render(const nlohmann::ordered_json& context,
                                             const RenderOptions& options) const {
  if (!context.is_object()) return absl::InvalidArgumentError("the template context must be a JSON object");
  try {
    return render_template(*root_, from_json(context), options.now ? *options.now : std::time(nullptr));
  } catch (const Error& e) {
    return absl::Status(e.code, e.message);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory rendering the template");
  } catch (const std::exception& e) {  // e.g. a number out of range
    return absl::InvalidArgumentError(std::string("rendering the template: ") + e.what());
  }
}

absl::StatusOr<std::string> Template::render(const nlohmann::json& context,
                                             const RenderOptions& options) const {
  return render(nlohmann::ordered_json::parse(context.dump()), options);
}

}  // namespace strata::jinja
