"""Realistic answers to notebook 05. ``Answer`` is provided by tests/support/notebooks.py.

WRONG: mistakes students make; each must lose points in its own exercise, and the feedback must
contain ``message``. UNUSUAL: correct answers written differently; each must keep full marks.
"""

LAYER_NORM = '''
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = {gamma}
        self.beta = {beta}
        self.eps = {eps}

    def forward(self, x):
        mean = {mean}
        var = {var}
        return {out}
'''
OUT = "self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta"

FEED_FORWARD = '''
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.linear1 = {linear1}
        self.linear2 = {linear2}
        self.dropout = {dropout}

    def forward(self, x):
        return {forward}
'''


def layer_norm(gamma="nn.Parameter(torch.ones(d_model))", beta="nn.Parameter(torch.zeros(d_model))", eps="eps",
               mean="x.mean(dim=-1, keepdim=True)", var="((x - mean) ** 2).mean(dim=-1, keepdim=True)", out=OUT):
    return LAYER_NORM.format(gamma=gamma, beta=beta, eps=eps, mean=mean, var=var, out=out)


def feed_forward(linear1="nn.Linear(d_model, d_ff)", linear2="nn.Linear(d_ff, d_model)", dropout="nn.Dropout(dropout)",
                 forward="self.linear2(self.dropout(torch.relu(self.linear1(x))))"):
    return FEED_FORWARD.format(linear1=linear1, linear2=linear2, dropout=dropout, forward=forward)


WRONG = [
    # LayerNorm
    # every failing cell names the mistake ("N of M values off" alone is no hint)
    Answer("LayerNorm", "unbiased variance (torch.var's default)",
           layer_norm(var="x.var(dim=-1, keepdim=True)"), "unbiased variance", misleading="values off"),
    Answer("LayerNorm", "the Annotated Transformer's torch.std (unbiased) + eps",
           layer_norm(out="self.gamma * (x - mean) / (x.std(dim=-1, keepdim=True) + self.eps) + self.beta"),
           "unbiased variance", misleading="values off"),
    Answer("LayerNorm", "eps added to the biased standard deviation, outside the square root",
           layer_norm(out="self.gamma * (x - mean) / (torch.sqrt(var) + self.eps) + self.beta"),
           "inside the square root"),
    Answer("LayerNorm", "normalises over dimension 0 (batch norm)",
           layer_norm(mean="x.mean(dim=0, keepdim=True)", var="((x - mean) ** 2).mean(dim=0, keepdim=True)"),
           "batch norm", misleading="no .detach()"),
    Answer("LayerNorm", "normalises over dimension 1 (right for [N, D], wrong for [B, T, D])",
           layer_norm(mean="x.mean(dim=1, keepdim=True)", var="((x - mean) ** 2).mean(dim=1, keepdim=True)"),
           "across the positions"),
    Answer("LayerNorm", "normalises each sentence as a whole (over the positions and the features)",
           layer_norm(mean="x.mean(dim=(-2, -1), keepdim=True)", var="((x - mean) ** 2).mean(dim=(-2, -1), keepdim=True)"),
           "must be taken over the last dimension"),
    Answer("LayerNorm", "forgets keepdim=True",
           layer_norm(mean="x.mean(dim=-1)", var="x.var(dim=-1, unbiased=False)"), "keepdim=True",
           misleading="raised RuntimeError: The size of tensor"),
    Answer("LayerNorm", "gamma and beta as plain tensors",
           layer_norm(gamma="torch.ones(d_model)", beta="torch.zeros(d_model)"), "nn.Parameter"),
    Answer("LayerNorm", "gamma and beta initialised the other way round",
           layer_norm(gamma="nn.Parameter(torch.zeros(d_model))", beta="nn.Parameter(torch.ones(d_model))"),
           "gamma and beta are swapped"),
    Answer("LayerNorm", "hard-codes eps", layer_norm(eps="1e-5"), "eps argument is ignored"),
    Answer("LayerNorm", "defaults to eps=1e-6 (the Annotated Transformer's value)",
           layer_norm().replace("eps=1e-5", "eps=1e-6"), "the default should be 1e-5"),
    Answer("LayerNorm", "no eps at all",
           layer_norm(out="self.gamma * (x - mean) / torch.sqrt(var) + self.beta"), "eps argument is ignored"),
    Answer("LayerNorm", "forgets beta",
           layer_norm(out="self.gamma * (x - mean) / torch.sqrt(var + self.eps)"), "beta is never added"),
    Answer("LayerNorm", "adds beta before the scaling: gamma * (x_hat + beta)",
           layer_norm(out="self.gamma * ((x - mean) / torch.sqrt(var + self.eps) + self.beta)"),
           "the formula ends with gamma * (...) + beta"),
    Answer("LayerNorm", "swaps gamma and beta in the formula",
           layer_norm(out="self.beta * (x - mean) / torch.sqrt(var + self.eps) + self.gamma"),
           "gamma and beta are swapped"),
    Answer("LayerNorm", "subtracts the mean from x in place", '''
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        x -= x.mean(dim=-1, keepdim=True)
        var = (x ** 2).mean(dim=-1, keepdim=True)
        return self.gamma * x / torch.sqrt(var + self.eps) + self.beta
''', "changed its input x in place"),
    Answer("LayerNorm", "treats the statistics as constants (detached)",
           layer_norm(mean="x.mean(dim=-1, keepdim=True).detach()",
                      var="((x - mean) ** 2).mean(dim=-1, keepdim=True).detach()"),
           "autograd graph"),
    # PositionwiseFeedForward
    Answer("PositionwiseFeedForward", "dropout after linear2",
           feed_forward(forward="self.dropout(self.linear2(torch.relu(self.linear1(x))))"), "whole tokens were dropped"),
    Answer("PositionwiseFeedForward", "dropout on the input",
           feed_forward(forward="self.linear2(torch.relu(self.linear1(self.dropout(x))))"), "whole tokens were dropped"),
    Answer("PositionwiseFeedForward", "no ReLU",
           feed_forward(forward="self.linear2(self.dropout(self.linear1(x)))"), "no ReLU between"),
    Answer("PositionwiseFeedForward", "GELU instead of ReLU",
           feed_forward(forward="self.linear2(self.dropout(F.gelu(self.linear1(x))))"), "GELU",
           misleading="in eval mode (dropout off)"),
    Answer("PositionwiseFeedForward", "ReLU after linear2",
           feed_forward(forward="torch.relu(self.linear2(self.dropout(self.linear1(x))))"), "applied after linear2"),
    Answer("PositionwiseFeedForward", "linear layers without bias",
           feed_forward(linear1="nn.Linear(d_model, d_ff, bias=False)", linear2="nn.Linear(d_ff, d_model, bias=False)"),
           "has no bias"),
    Answer("PositionwiseFeedForward", "hard-codes the dropout probability",
           feed_forward(dropout="nn.Dropout(0.1)"), "pass the dropout argument on"),
    Answer("PositionwiseFeedForward", "swaps the sizes of the two layers",
           feed_forward(linear1="nn.Linear(d_ff, d_model)", linear2="nn.Linear(d_model, d_ff)"), "expected 4 -> 10"),
    Answer("PositionwiseFeedForward", "F.dropout without training=self.training",
           feed_forward(forward="self.linear2(F.dropout(torch.relu(self.linear1(x)), p=self.dropout.p))"),
           "dropout must be off in eval mode"),
    Answer("PositionwiseFeedForward", "never applies dropout",
           feed_forward(forward="self.linear2(torch.relu(self.linear1(x)))"), "dropout is never applied"),
]

UNUSUAL = [
    Answer("LayerNorm", "register_parameter, torch.var_mean with correction=0 and torch.rsqrt", '''
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.register_parameter("gamma", nn.Parameter(torch.ones(d_model)))
        self.register_parameter("beta", nn.Parameter(torch.zeros(d_model)))
        self.eps = eps

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.gamma + self.beta
'''),
    Answer("LayerNorm", "sums divided by the size, torch.addcmul for the affine step", '''
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        n = x.shape[-1]
        centred = x - x.sum(-1, keepdim=True) / n
        std = (centred.pow(2).sum(-1, keepdim=True) / n + self.eps).sqrt()
        return torch.addcmul(self.beta, self.gamma, centred / std)
'''),
    Answer("LayerNorm", "computes in float64 and casts back to the input's dtype", '''
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = float(eps)

    def forward(self, x):
        x64 = x.double()
        mu = x64.mean(-1, keepdim=True)
        sigma2 = torch.square(x64 - mu).mean(-1, keepdim=True)
        y = (x64 - mu) / torch.sqrt(sigma2 + self.eps)
        return (y * self.gamma.double() + self.beta.double()).to(x.dtype)
'''),
    Answer("PositionwiseFeedForward", "dropout before the ReLU (the same function: relu(c h) = c relu(h) for c >= 0)",
           feed_forward(forward="self.linear2(torch.relu(self.dropout(self.linear1(x))))")),
    Answer("PositionwiseFeedForward", "an nn.Sequential besides the named attributes", '''
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(p=dropout)
        self.net = nn.Sequential(self.linear1, nn.ReLU(), self.dropout, self.linear2)

    def forward(self, x):
        return self.net(x)
'''),
    Answer("PositionwiseFeedForward", "F.linear, clamp(min=0) and F.dropout with the training flag", '''
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        hidden = F.linear(x, self.linear1.weight, self.linear1.bias).clamp(min=0)
        hidden = F.dropout(hidden, p=self.dropout.p, training=self.training)
        return F.linear(hidden, self.linear2.weight, self.linear2.bias)
'''),
]
