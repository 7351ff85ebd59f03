// binding_no_impl.cpp: bindings/common's argument checks compiled in a translation unit without
// selscan's implementation (selscan.h declares its >>operands tables with the API), as a binding's
// op TUs use them; the library's size rules they call stay undefined here, linked from the TU that
// holds the implementation. Compiled only (tests/build_checks.sh).
#include "../../selscan.h"
#include "../../bindings/common/selscan_binding.h"

namespace bind = selscan_binding;
bind::Refusal (*check_scan)(const bind::ScanArgs &, const bind::Forms &, bind::Checked *) = &bind::CheckScanArgs;
bind::Refusal (*check_step)(const bind::StepArgs &, const bind::Forms &, bind::Checked *) = &bind::CheckStepArgs;
bind::Refusal (*check_conv)(const bind::ConvArgs &, const bind::Forms &, bind::Checked *) = &bind::CheckConvArgs;
bind::Refusal (*check_conv_step)(const bind::ConvStepArgs &, const bind::Forms &, bind::Checked *) =
    &bind::CheckConvStepArgs;
