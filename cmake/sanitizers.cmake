# STRATA_SANITIZE=ON: every target is built with ASan + UBSan, and UBSan
# findings abort so that ctest reports them as failures.
if(STRATA_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
