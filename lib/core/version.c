/* Run-time version queries; the numbers come from the generated
 * rlpost_version.h so header and library cannot disagree at build time. */
#include "rlpost.h"

unsigned rlp_version_number(void)
{
    return RLP_VERSION_NUMBER;
}

const char *rlp_version_string(void)
{
    return RLP_VERSION_STRING;
}

unsigned rlp_abi_version(void)
{
    return RLP_ABI_VERSION;
}
