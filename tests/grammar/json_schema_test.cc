#include "gtest/gtest.h"
#include "model/grammar/grammar.h"
