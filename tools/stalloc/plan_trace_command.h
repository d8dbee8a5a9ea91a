// `stalloc plan TRACE... -o PLAN ...`: the trace form of the plan subcommand. cmd_plan.cpp owns
// the `plan` registration and hands every invocation without --dsa to this function.
#pragma once

#include <string>
#include <vector>

namespace stalloc::cli {

int plan_trace_command(const std::vector<std::string>& args);

}  // namespace stalloc::cli
