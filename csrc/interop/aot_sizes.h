// aot_sizes.h: the rule that sizes an output nobody gave, for a call that allocates it, for
// Pipeline.output_regions() and through it for hb.torch's ops: the region the pipeline fixes,
// else the largest region whose required input regions lie within the inputs. Found with
// Halide's own bounds queries (required_regions()), kept per pipeline, input regions and scalars.
#pragma once

#include <optional>
#include <vector>

#include "interop/aot_call.h"

namespace hb {

/// The region of each output of `p` that `args` gives none, per argument of the pipeline (none
/// for the others): for inputs covering the regions `args` gives them (an input given none
/// constrains nothing) and its scalars (defaults where not given), outputs given a region in
/// `args` staying as given.
///
/// - An output the pipeline fixes (its bounds queries, asked about two different empty regions,
///   answer alike) gets that region: set from its inputs, scalars or constants.
/// - Any other gets the largest region whose required input regions lie within the regions the
///   inputs cover: per axis, grown from one element while the bounds query's answer stays inside
///   (an elementwise pipeline: the input's region; a boundary-free 3 x 3 stencil: 2 less in each
///   axis, at mins 1; a 2x upsampler: twice the input). A side that grows without end (an input
///   read through a boundary condition, which clamps to the input's own region) ends where the
///   first input of as many axes ends. Over an empty input, the axes that grow with it are empty.
/// - ValueError naming the output where no element of it can be computed from the inputs (a
///   gather or a lookup table whose required region does not shrink with the output), ending in
///   "; pass an output buffer".
///
/// The answers are kept per pipeline, regions and scalars: a call whose input regions and
/// scalars were seen before asks no bounds query.
std::vector<std::optional<Region>> sized_outputs(const AotPipeline &p, const QueryRequest &args);

/// sized_outputs() as (output name, region) pairs, in the pipeline's order, for the outputs
/// `args` gives no region.
std::vector<std::pair<const char *, Region>> output_regions(const AotPipeline &p, const QueryRequest &args);

}  // namespace hb
